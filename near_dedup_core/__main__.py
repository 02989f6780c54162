from near_dedup_core.cli import console_main

console_main()
