#!/bin/sh
# Set up a PostgreSQL server for the team deployment (docs/postgres.md): one login role that
# owns every database it is given, e.g. the Dagster instance's and one index per kind.
#
#   PGHOST=db.internal PGUSER=postgres NEAR_DEDUP_PG_PASSWORD=... \
#     scripts/setup_postgres.sh near_dedup dagster near_dedup_cpt near_dedup_sft
#
# It connects as an administrator (a role allowed to create roles and databases) through
# libpq's usual environment: PGHOST, PGPORT, PGUSER, PGPASSWORD or ~/.pgpass. The new role's
# password is NEAR_DEDUP_PG_PASSWORD (unset: the role gets no password, for peer or
# certificate authentication). Run again, it creates only what is missing and sets the
# password again.
#
# Each database is created with the role as its owner (`createdb -O`): since PostgreSQL 15
# only the database owner may create tables in schema public, so owning the database is what
# lets `near-dedup index` and Dagster create their tables. The explicit grant below also
# covers databases created by someone else, and servers before 15.
set -eu

if [ $# -lt 2 ]; then
    echo "usage: $0 ROLE DATABASE..." >&2
    exit 1
fi
role=$1
shift

psql_admin() {
    psql --no-psqlrc --quiet --set ON_ERROR_STOP=1 --set target_role="$role" "$@"
}

exists=$(psql_admin --tuples-only --no-align --dbname postgres \
    --command "SELECT 1 FROM pg_roles WHERE rolname = '$(printf %s "$role" | sed "s/'/''/g")'")
if [ "$exists" != 1 ]; then
    createuser --login --no-superuser --no-createdb --no-createrole "$role"
fi
if [ -n "${NEAR_DEDUP_PG_PASSWORD:-}" ]; then
    printf '%s\n' 'ALTER ROLE :"target_role" PASSWORD :'"'"'password'"'"';' |
        psql_admin --dbname postgres --set password="$NEAR_DEDUP_PG_PASSWORD"
fi

for db in "$@"; do
    found=$(psql_admin --tuples-only --no-align --dbname postgres \
        --command "SELECT 1 FROM pg_database WHERE datname = '$(printf %s "$db" | sed "s/'/''/g")'")
    if [ "$found" != 1 ]; then
        createdb --owner "$role" --template template0 --encoding UTF8 "$db"
    fi
    printf '%s\n' 'GRANT CREATE, USAGE ON SCHEMA public TO :"target_role";' |
        psql_admin --dbname "$db"
done
echo "role $role owns database(s): $*"
