// An idempotent acks=all Java producer and a Java consumer in a group, side by
// side, for tests/test_replication_clients.py: the producer sends COUNT values
// "<topic>-<i>" to partition 0 at RATE a second; every acknowledgement,
// error and consumed record is a line on stdout:
//   ACK <offset> <value> | ERR <value> <exception> | READ <partition> <offset> <value> | PRODUCED
// The consumer runs until a line arrives on stdin (the test's "stop").
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class FailoverClient {
    static volatile boolean stop = false;

    static synchronized void out(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int count = Integer.parseInt(args[2]), rate = Integer.parseInt(args[3]);
        Thread consumer = new Thread(() -> {
            Properties c = new Properties();
            c.put("bootstrap.servers", bootstrap);
            c.put("group.id", topic + "-readers");
            c.put("auto.offset.reset", "earliest");
            c.put("enable.auto.commit", "true");
            c.put("auto.commit.interval.ms", "500");
            try (KafkaConsumer<String, String> k = new KafkaConsumer<>(c, new StringDeserializer(),
                                                                       new StringDeserializer())) {
                k.subscribe(List.of(topic));
                while (!stop) {
                    for (ConsumerRecord<String, String> r : k.poll(Duration.ofMillis(200))) {
                        out("READ " + r.partition() + " " + r.offset() + " " + r.value());
                    }
                }
            }
        });
        consumer.start();
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("enable.idempotence", "true");
        p.put("acks", "all");
        p.put("linger.ms", "5");
        p.put("delivery.timeout.ms", "120000");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p, new StringSerializer(),
                                                                          new StringSerializer())) {
            long start = System.nanoTime();
            for (int i = 0; i < count; i++) {
                String value = topic + "-" + i;
                producer.send(new ProducerRecord<>(topic, 0, null, value), (md, e) -> {
                    if (e == null) {
                        out("ACK " + md.offset() + " " + value);
                    } else {
                        out("ERR " + value + " " + e);
                    }
                });
                long due = start + (long) (i + 1) * 1_000_000_000L / rate;
                long wait = due - System.nanoTime();
                if (wait > 0) {
                    Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                }
            }
            producer.flush();
        }
        out("PRODUCED");
        new BufferedReader(new InputStreamReader(System.in)).readLine();
        stop = true;
        consumer.join();
    }
}
