// RocketMQ 5's official Java gRPC client (org.apache.rocketmq:rocketmq-client-java, through
// bench/anchors/rocketmq/grpc-client/pom.xml) driven from tests/compat/test_java_grpc_client.py
// (#30). TLS, the client's default, unless -Dssl=false; ACL credentials from -Dak= -Dsk=.
// One command a run; one JSON line out.
//
//   produce   ENDPOINT TOPIC COUNT WAY          WAY: normal fifo delay tx-commit tx-rollback tx-check
//   receive   ENDPOINT GROUP TOPIC COUNT SECS   a SimpleConsumer receives and acks COUNT
//   redeliver ENDPOINT GROUP TOPIC              receive one, extend its invisible time to 2 s
//                                               without acking, get it again, ack it
//   push      ENDPOINT GROUP TOPIC COUNT SECS   a PushConsumer consumes COUNT
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientConfigurationBuilder;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.StaticSessionCredentialsProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

public class GrpcClient {
    static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();

    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n") + "\"";
    }

    static String list(List<String> items) {
        List<String> q = new ArrayList<>();
        for (String s : items) q.add(quote(s));
        return "[" + String.join(",", q) + "]";
    }

    static ClientConfiguration config(String endpoint) {
        boolean ssl = Boolean.parseBoolean(System.getProperty("ssl", "true"));
        ClientConfigurationBuilder b = ClientConfiguration.newBuilder().setEndpoints(endpoint)
            .enableSsl(ssl).setRequestTimeout(Duration.ofSeconds(10));
        String ak = System.getProperty("ak");
        if (ak != null) {
            b.setCredentialProvider(new StaticSessionCredentialsProvider(ak, System.getProperty("sk")));
        }
        return b.build();
    }

    static String text(MessageView m) {
        ByteBuffer b = m.getBody().duplicate();
        byte[] out = new byte[b.remaining()];
        b.get(out);
        return new String(out, StandardCharsets.UTF_8);
    }

    static String view(MessageView m) {
        return "{\"body\":" + quote(text(m)) + ",\"id\":" + quote(m.getMessageId().toString())
            + ",\"tag\":" + quote(m.getTag().orElse("")) + ",\"keys\":" + list(new ArrayList<>(m.getKeys()))
            + ",\"group\":" + quote(m.getMessageGroup().orElse(""))
            + ",\"attempt\":" + m.getDeliveryAttempt()
            + ",\"at\":" + System.currentTimeMillis() / 1000.0 + "}";
    }

    static void produce(String[] a) throws Exception {
        String topic = a[2], way = a[4];
        int n = Integer.parseInt(a[3]);
        ConcurrentLinkedQueue<String> checked = new ConcurrentLinkedQueue<>();
        List<String> ids = new ArrayList<>();
        try (Producer p = PROVIDER.newProducerBuilder().setClientConfiguration(config(a[1]))
                .setTopics(topic).setTransactionChecker(m -> {
                    checked.add(text(m));
                    return TransactionResolution.COMMIT;
                }).build()) {
            for (int i = 0; i < n; i++) {
                MessageBuilder b = PROVIDER.newMessageBuilder().setTopic(topic)
                    .setBody((way + "-" + i).getBytes(StandardCharsets.UTF_8))
                    .setKeys("key-" + i).setTag("TagJava");
                if (way.equals("fifo")) b.setMessageGroup("group-" + (i % 2));
                if (way.equals("delay")) b.setDeliveryTimestamp(System.currentTimeMillis() + 2000);
                if (way.startsWith("tx-")) {
                    Transaction tx = p.beginTransaction();
                    ids.add(p.send(b.build(), tx).getMessageId().toString());
                    if (way.equals("tx-commit")) tx.commit();
                    if (way.equals("tx-rollback")) tx.rollback();
                } else {
                    ids.add(p.send(b.build()).getMessageId().toString());
                }
            }
            // the broker asks back about a transaction left open
            long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (way.equals("tx-check") && checked.size() < n && System.nanoTime() < end) {
                Thread.sleep(100);
            }
        }
        System.out.println("{\"way\":" + quote(way) + ",\"ids\":" + list(ids)
            + ",\"checked\":" + list(new ArrayList<>(checked)) + "}");
    }

    static SimpleConsumer simple(String endpoint, String group, String topic) throws Exception {
        return PROVIDER.newSimpleConsumerBuilder().setClientConfiguration(config(endpoint))
            .setConsumerGroup(group).setAwaitDuration(Duration.ofSeconds(2))
            .setSubscriptionExpressions(Collections.singletonMap(topic, FilterExpression.SUB_ALL))
            .build();
    }

    static void receive(String[] a) throws Exception {
        int n = Integer.parseInt(a[4]);
        List<String> got = new ArrayList<>();
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(Long.parseLong(a[5]));
        try (SimpleConsumer c = simple(a[1], a[2], a[3])) {
            while (got.size() < n && System.nanoTime() < end) {
                for (MessageView m : c.receive(16, Duration.ofSeconds(20))) {
                    c.ack(m);
                    got.add(view(m));
                }
            }
        }
        System.out.println("{\"messages\":[" + String.join(",", got) + "]}");
    }

    static void redeliver(String[] a) throws Exception {
        try (SimpleConsumer c = simple(a[1], a[2], a[3])) {
            MessageView first = null;
            long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (first == null && System.nanoTime() < end) {
                List<MessageView> ms = c.receive(1, Duration.ofSeconds(20));
                if (!ms.isEmpty()) first = ms.get(0);
            }
            String firstView = view(first);
            c.changeInvisibleDuration(first, Duration.ofSeconds(2));
            MessageView again = null;
            while (again == null && System.nanoTime() < end) {
                List<MessageView> ms = c.receive(1, Duration.ofSeconds(20));
                if (!ms.isEmpty()) again = ms.get(0);
            }
            c.ack(again);
            System.out.println("{\"first\":" + firstView + ",\"again\":" + view(again) + "}");
        }
    }

    static void push(String[] a) throws Exception {
        int n = Integer.parseInt(a[4]);
        ConcurrentLinkedQueue<String> got = new ConcurrentLinkedQueue<>();
        CountDownLatch all = new CountDownLatch(n);
        try (PushConsumer c = PROVIDER.newPushConsumerBuilder().setClientConfiguration(config(a[1]))
                .setConsumerGroup(a[2])
                .setSubscriptionExpressions(Collections.singletonMap(a[3], FilterExpression.SUB_ALL))
                .setMessageListener(m -> {
                    got.add(view(m));
                    all.countDown();
                    return ConsumeResult.SUCCESS;
                }).build()) {
            all.await(Long.parseLong(a[5]), TimeUnit.SECONDS);
        }
        System.out.println("{\"messages\":[" + String.join(",", got) + "]}");
    }

    public static void main(String[] a) throws Exception {
        switch (a[0]) {
            case "produce": produce(a); break;
            case "receive": receive(a); break;
            case "redeliver": redeliver(a); break;
            case "push": push(a); break;
            default: throw new IllegalArgumentException("unknown command " + a[0]);
        }
        System.exit(0);  // the client's own threads would keep the JVM alive
    }
}
