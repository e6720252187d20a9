"""Ways to start a broker, the top of the import graph:

    cli            the `kproto` command (`serve`, `storage`, `cluster`, `--version`)
    storage_tool   `kproto storage format|info|random-uuid` (Kafka's kafka-storage.sh)
    cluster_tool   `kproto cluster --nodes N`: a local KRaft cluster for development
    embedded       a broker inside a program or a test (a thread, a trio task, a subprocess)
    process        BrokerProcess: one `kproto serve` child process, waited for until it is ready
    pytest_plugin  pytest fixtures over embedded (the `pytest11` entry point)
    startup_errors start-up failures explained in one line
    logging_setup  structured key=value logging, quiet by default
    version        kproto's version and the Kafka version it follows

Nothing else in broker/ imports this package."""
