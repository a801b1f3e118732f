-- Roles and databases of the local stack (see handoff/stack/postgres.py bootstrap).
CREATE ROLE handoff LOGIN CREATEROLE PASSWORD 'handoff';
CREATE DATABASE handoff OWNER handoff;
CREATE ROLE apicurio LOGIN PASSWORD 'apicurio';
CREATE DATABASE apicurio OWNER apicurio;
