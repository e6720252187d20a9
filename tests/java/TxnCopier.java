import java.time.Duration;
import java.util.*;

import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Exactly-once with the Java client (tests/test_transactions_v2_java.py): a transactional producer
 * writes `txns` transactions of 10 records to `source` (every third one aborted), then a
 * consume-transform-produce loop copies `source` (read_committed) to `sink` with its offsets
 * committed in each transaction; finally a read_committed consumer reads `sink`.
 * Prints "produced N", "copied N", "sink N DISTINCT" and the exception of any failure.
 */
public class TxnCopier {
    static Properties producerProps(String bootstrap, String txnId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", txnId);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("transaction.timeout.ms", "30000");
        return p;
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, String group) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("isolation.level", "read_committed");
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        return new KafkaConsumer<>(c);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], source = args[1], sink = args[2], txnId = args[3];
        int txns = Integer.parseInt(args[4]);
        int committed = 0;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps(bootstrap, txnId + "-src"))) {
            producer.initTransactions();
            for (int t = 0; t < txns; t++) {
                producer.beginTransaction();
                for (int i = 0; i < 10; i++)
                    producer.send(new ProducerRecord<>(source, i % 3, "k" + i, "t" + t + "-" + i));
                if (t % 3 == 2) {
                    producer.abortTransaction();
                } else {
                    producer.commitTransaction();
                    committed += 10;
                }
            }
        }
        System.out.println("produced " + committed);
        int copied = 0;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps(bootstrap, txnId + "-copy"));
             KafkaConsumer<String, String> in = consumer(bootstrap, txnId + "-group")) {
            producer.initTransactions();
            in.subscribe(Collections.singletonList(source));
            long deadline = System.currentTimeMillis() + 60000;
            while (copied < committed && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = in.poll(Duration.ofMillis(200));
                if (records.isEmpty()) continue;
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : records) {
                    producer.send(new ProducerRecord<>(sink, r.partition(), r.key(), r.value()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    copied++;
                }
                producer.sendOffsetsToTransaction(offsets, in.groupMetadata());
                producer.commitTransaction();
            }
        }
        System.out.println("copied " + copied);
        Set<String> seen = new HashSet<>();
        int total = 0;
        try (KafkaConsumer<String, String> out = consumer(bootstrap, txnId + "-check")) {
            out.subscribe(Collections.singletonList(sink));
            long deadline = System.currentTimeMillis() + 30000;
            while (seen.size() < committed && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : out.poll(Duration.ofMillis(200))) {
                    seen.add(r.value());
                    total++;
                }
            }
        }
        System.out.println("sink " + total + " " + seen.size());
    }
}
