"""The outbox relay: committed outbox rows to Kafka as Avro events, in order per document."""
