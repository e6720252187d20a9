// The Java AdminClient (kafka-clients 4.3) on a share group's offsets, for
// tests/test_share_groups_java.py. Args: bootstrap. Reads commands from stdin, one a line, and prints
// one JSON line each: "alter GROUP TOPIC PARTITION OFFSET" (alterShareGroupOffsets),
// "delete GROUP TOPIC" (deleteShareGroupOffsets), "list GROUP" (listShareGroupOffsets:
// {"offsets": {"topic-partition": [start offset, lag]}}). A failed call prints
// {"error": the exception's class name, "message": ...}.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.common.TopicPartition;

public class ShareOffsetsAdmin {
    private static String quote(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("default.api.timeout.ms", "30000");
        props.put("request.timeout.ms", "10000");
        try (Admin admin = Admin.create(props);
             BufferedReader in = new BufferedReader(new InputStreamReader(System.in))) {
            System.out.println("{\"ready\": true}");
            System.out.flush();
            String line;
            while ((line = in.readLine()) != null) {
                String[] a = line.trim().split(" ");
                String out;
                try {
                    if (a[0].equals("alter")) {
                        admin.alterShareGroupOffsets(a[1], Map.of(new TopicPartition(a[2], Integer.parseInt(a[3])),
                                                                  Long.parseLong(a[4]))).all().get();
                        out = "{\"ok\": true}";
                    } else if (a[0].equals("delete")) {
                        admin.deleteShareGroupOffsets(a[1], Set.of(a[2])).all().get();
                        out = "{\"ok\": true}";
                    } else if (a[0].equals("list")) {
                        Map<TopicPartition, SharePartitionOffsetInfo> got = admin.listShareGroupOffsets(
                            Map.of(a[1], new ListShareGroupOffsetsSpec())).partitionsToOffsetInfo(a[1]).get();
                        TreeMap<String, String> sorted = new TreeMap<>();
                        got.forEach((tp, info) -> sorted.put(tp.toString(), info == null ? "null"
                            : "[" + info.startOffset() + ", " + info.lag().orElse(-1L) + "]"));
                        StringBuilder sb = new StringBuilder("{\"offsets\": {");
                        String sep = "";
                        for (Map.Entry<String, String> e : sorted.entrySet()) {
                            sb.append(sep).append(quote(e.getKey())).append(": ").append(e.getValue());
                            sep = ", ";
                        }
                        out = sb.append("}}").toString();
                    } else {
                        out = "{\"error\": \"unknown command\"}";
                    }
                } catch (ExecutionException e) {
                    Throwable c = e.getCause();
                    out = "{\"error\": " + quote(c.getClass().getSimpleName()) + ", \"message\": " + quote(c.getMessage()) + "}";
                }
                System.out.println(out);
                System.out.flush();
            }
        }
    }
}
