"""Security of client connections: TLS listeners, SASL authentication,
the ACL authorizer and client quotas (Kafka's security model, Kafka's keys)."""
