"""The SQLite backend: an index in one dedicated SQLite file (WAL mode). `snapshot`: every
read of a scan on a plain ``sqlite3`` connection, the file's checks and one-line errors;
`write`: the writer's lock, a batch's connections, a new index's staged file."""
