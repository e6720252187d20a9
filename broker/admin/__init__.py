"""The admin CLI (`kproto topic|produce|consume|group|cluster|acl|user`): a Kafka client built on
kproto's own codecs (kproto/), so it works against any Kafka-protocol cluster (kproto, Apache
Kafka, Redpanda). It imports nothing from the broker's server side. One module per command
family; `commands.py` registers them with the `kproto` command. docs/cli.md is the user's guide."""
