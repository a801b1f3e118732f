"""The local stack without Docker: PostgreSQL, Kafka, the schema registry, moto, as processes."""
