// One share-group member of the Java client (KafkaShareConsumer, explicit acknowledgement), for
// tests/test_share_groups_java.py. Args: bootstrap group topic mode. Record values are "i:kind":
// kind loop is released every time, release is released on its first delivery, reject is rejected,
// others are accepted; mode "hold" acknowledges nothing after its first records (the test kills it);
// mode "wait" makes the consumer and prints "started", then works only once "go" comes on stdin (a
// member whose JVM start-up is over before the moment the test measures from).
// Prints JSON lines like the confluent-kafka member of tests/test_share_groups.py; "close" on stdin
// closes it.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.Properties;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class ShareGroupConsumer {
    private static volatile boolean closing = false;
    private static volatile boolean go = false;

    private static synchronized void out(String json) {
        System.out.println(json);
        System.out.flush();
    }

    private static double now() {
        return System.currentTimeMillis() / 1000.0;
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[1]);
        props.put("share.acknowledgement.mode", "explicit");
        props.put("max.poll.records", "10");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        String mode = args[3];
        boolean waiting = mode.equals("wait");
        if (waiting) mode = "work";
        Thread stdin = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in))) {
                String line;
                while ((line = r.readLine()) != null) {
                    if (line.trim().equals("close")) {
                        closing = true;
                        return;
                    }
                    if (line.trim().equals("go")) {
                        go = true;
                    }
                }
            } catch (Exception e) {
                // stdin gone: keep consuming until killed
            }
        });
        stdin.setDaemon(true);
        stdin.start();
        try (KafkaShareConsumer<byte[], byte[]> c = new KafkaShareConsumer<>(props)) {
            c.subscribe(java.util.List.of(args[2]));
            out("{\"ev\":\"started\"}");
            while (waiting && !go && !closing) Thread.sleep(20);
            while (!closing) {
                ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    String v = new String(r.value());
                    int dc = r.deliveryCount().isPresent() ? r.deliveryCount().get() : 0;
                    out("{\"ev\":\"msg\",\"o\":" + r.offset() + ",\"dc\":" + dc + ",\"v\":\"" + v + "\",\"t\":" + now() + "}");
                    if (mode.equals("hold")) continue;
                    String kind = v.split(":")[1];
                    AcknowledgeType ack;
                    String k;
                    if (kind.equals("loop") || (kind.equals("release") && dc == 1)) {
                        ack = AcknowledgeType.RELEASE; k = "release";
                    } else if (kind.equals("reject")) {
                        ack = AcknowledgeType.REJECT; k = "reject";
                    } else {
                        ack = AcknowledgeType.ACCEPT; k = "accept";
                    }
                    out("{\"ev\":\"ack\",\"o\":" + r.offset() + ",\"k\":\"" + k + "\",\"t\":" + now() + "}");
                    c.acknowledge(r, ack);
                }
                if (mode.equals("hold") && !records.isEmpty()) {
                    out("{\"ev\":\"holding\"}");
                    Thread.sleep(3_600_000);
                }
                if (!records.isEmpty()) Thread.sleep(20);
            }
        }
        out("{\"ev\":\"closed\"}");
    }
}
