// One KIP-848 consumer (group.protocol=consumer) of the Java client, for
// tests/test_consumer_groups_kip848_java.py. Args: bootstrap group topic
// [instance-id [protocol]] (protocol: consumer, the default, or classic); a topic "re:PATTERN" subscribes to a broker-side regular
// expression (SubscriptionPattern, RE2/J). Prints JSON lines: started, assign/revoke (topic-partition
// lists) and one line per record; "close" on stdin closes it (leaving the group).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class Kip848Consumer {
    private static volatile boolean closing = false;

    private static synchronized void out(String json) {
        System.out.println(json);
        System.out.flush();
    }

    private static String parts(Collection<TopicPartition> tps) {
        StringBuilder sb = new StringBuilder("[");
        for (TopicPartition tp : tps) {
            if (sb.length() > 1) sb.append(',');
            sb.append("[\"").append(tp.topic()).append("\",").append(tp.partition()).append(']');
        }
        return sb.append(']').toString();
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, args[1]);
        props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, args.length > 4 ? args[4] : "consumer");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.AUTO_COMMIT_INTERVAL_MS_CONFIG, "200");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        if (args.length > 3 && !args[3].isEmpty()) {
            props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, args[3]);
        }
        Thread stdin = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in))) {
                String line;
                while ((line = r.readLine()) != null) {
                    if (line.trim().equals("close")) {
                        closing = true;
                        return;
                    }
                }
            } catch (Exception e) {
                // stdin gone: keep consuming until killed
            }
        });
        stdin.setDaemon(true);
        stdin.start();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> tps) {
                    out("{\"ev\":\"revoke\",\"parts\":" + parts(tps) + "}");
                }
                public void onPartitionsAssigned(Collection<TopicPartition> tps) {
                    out("{\"ev\":\"assign\",\"parts\":" + parts(tps) + "}");
                }
                public void onPartitionsLost(Collection<TopicPartition> tps) {
                    out("{\"ev\":\"revoke\",\"parts\":" + parts(tps) + "}");
                }
            };
            if (args[2].startsWith("re:")) {
                consumer.subscribe(new SubscriptionPattern(args[2].substring(3)), listener);
            } else {
                consumer.subscribe(List.of(args[2]), listener);
            }
            out("{\"ev\":\"started\"}");
            while (!closing) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                    out("{\"ev\":\"msg\",\"t\":\"" + r.topic() + "\",\"p\":" + r.partition() + ",\"o\":" + r.offset() + "}");
                }
            }
        }
        out("{\"ev\":\"closed\"}");
    }
}
