import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Produced;

/**
 * A Kafka Streams exactly-once (exactly_once_v2) application for tests/test_streams_eos_java.py:
 * `input` (String keys and values) is copied to `copies` and counted per key into `counts`
 * (a RocksDB store with its changelog; caching off, so every input record gives one count update).
 * Each record takes `delayMs` to process. While the file `stallFile` exists, the record whose value
 * is `stallValue` stalls the instance after its copy and count are sent: it prints "STALLED" and
 * waits to be killed, its transaction open (the test deletes the file before it starts a new one).
 * Prints each state it enters (RUNNING, ...); runs until killed.
 * Args: bootstrap appId stateDir input copies counts delayMs stallValue stallFile
 */
public class StreamsEosApp {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], appId = args[1], stateDir = args[2];
        String input = args[3], copies = args[4], counts = args[5];
        long delayMs = Long.parseLong(args[6]);
        String stallValue = args[7];
        java.nio.file.Path stallFile = java.nio.file.Paths.get(args[8]);

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        // the killed instance's member leaves the group by its session timeout (the broker's minimum)
        p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 6000);
        p.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 1000);
        p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        // longer than a restart takes on a loaded machine: the killed instance's open transaction
        // is aborted by the restarted one's InitProducerId (the fence), not by its timeout
        p.put(StreamsConfig.producerPrefix("transaction.timeout.ms"), 120000);

        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> in = builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()));
        KStream<String, String> slow = in.peek((k, v) -> {
            try {
                Thread.sleep(delayMs);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        slow.to(copies, Produced.with(Serdes.String(), Serdes.String()));
        slow.groupByKey().count().toStream()
            .to(counts, Produced.with(Serdes.String(), Serdes.Long()));
        // added last, so it runs after the record's copy and count were forwarded
        slow.peek((k, v) -> {
            if (v.equals(stallValue) && java.nio.file.Files.exists(stallFile)) {
                System.out.println("STALLED");
                System.out.flush();
                while (true) {
                    try {
                        Thread.sleep(1000);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            }
        });

        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        CountDownLatch dead = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println(now);
            System.out.flush();
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING)
                dead.countDown();
        });
        streams.setUncaughtExceptionHandler(e -> {
            e.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> streams.close(Duration.ofSeconds(10))));
        streams.start();
        dead.await();
        System.exit(1);
    }
}
