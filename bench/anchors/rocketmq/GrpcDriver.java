// RocketMQ 5's official Java gRPC client (rocketmq-client-java, grpc-client/pom.xml) driving
// either endpoint: ledgermq's gRPC port or RocketMQ's proxy (#29's gRPC rows, #33). One
// command a run; one JSON line out per result; {"timed":true} marks the end of the warm-up
// (the JIT, the route and the first session are not what is measured: WARMUP sends, enough
// for the client's JIT and a fresh proxy's to settle; 500 measured both still compiling, a
// sync p50 of 3-9 ms that fell to ~1 ms after a few thousand sends). Plain text on both
// sides (no TLS), as the remoting rows are. A consumer's group must exist before its
// build(): RocketMQ 5.5's proxy answers the settings of an unknown group with "group not
// found" (no auto-creation), which the client only shows as a cancelled start-up.
//
//   sync    ENDPOINT TOPIC COUNT SIZE          one thread, one message a request: p50/p99
//   threads ENDPOINT TOPIC COUNT SIZE THREADS  THREADS threads, each one message a request
//   receive ENDPOINT TOPIC GROUP COUNT         a SimpleConsumer receives 32 at a time and
//                                              acks each message, until COUNT were acked
//   push    ENDPOINT TOPIC GROUP COUNT         a PushConsumer consumes COUNT messages
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;

public class GrpcDriver {
    static final int WARMUP = 5000;
    static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();

    static void timed() {
        System.out.println("{\"timed\":true}");
        System.out.flush();
    }

    static ClientConfiguration config(String endpoint) {
        return ClientConfiguration.newBuilder().setEndpoints(endpoint)
            .enableSsl(Boolean.getBoolean("grpc.driver.ssl"))
            .setRequestTimeout(Duration.ofSeconds(10)).build();
    }

    static Message message(String topic, byte[] body) {
        return PROVIDER.newMessageBuilder().setTopic(topic).setBody(body).build();
    }

    // a producer whose first send went through (retried for up to a minute: a fresh
    // endpoint may not know the topic's route yet), then WARMUP more
    static Producer producer(String endpoint, String topic, byte[] body) throws Exception {
        long end = System.nanoTime() + 60_000_000_000L;
        while (true) {
            try {
                Producer p = PROVIDER.newProducerBuilder().setClientConfiguration(config(endpoint))
                    .setTopics(topic).build();
                p.send(message(topic, body));
                for (int i = 0; i < WARMUP; i++) p.send(message(topic, body));
                return p;
            } catch (Exception e) {
                if (System.nanoTime() > end) throw e;
                Thread.sleep(200);
            }
        }
    }

    static double pct(long[] nanos, double p) {
        long[] s = nanos.clone();
        Arrays.sort(s);
        return s[Math.min(s.length - 1, (int) (p / 100 * (s.length - 1)))] / 1e6;
    }

    static void result(String workload, long n, double secs, String extra) {
        System.out.printf("{\"workload\":\"%s\",\"msgs\":%d,\"secs\":%.3f,\"msgs_per_s\":%.1f%s}%n",
            workload, n, secs, n / secs, extra);
        System.out.flush();
    }

    static void sync(String[] a) throws Exception {
        int n = Integer.parseInt(a[3]);
        byte[] body = new byte[Integer.parseInt(a[4])];
        try (Producer p = producer(a[1], a[2], body)) {
            timed();
            long[] lat = new long[n];
            long t0 = System.nanoTime();
            for (int i = 0; i < n; i++) {
                long s = System.nanoTime();
                p.send(message(a[2], body));
                lat[i] = System.nanoTime() - s;
            }
            double secs = (System.nanoTime() - t0) / 1e9;
            result("sync", n, secs, String.format(",\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"warmup_msgs\":%d",
                pct(lat, 50), pct(lat, 99), WARMUP + 1));
        }
    }

    static void threads(String[] a) throws Exception {
        int n = Integer.parseInt(a[3]), threads = Integer.parseInt(a[5]);
        byte[] body = new byte[Integer.parseInt(a[4])];
        try (Producer p = producer(a[1], a[2], body)) {
            timed();
            AtomicLong left = new AtomicLong(n), failed = new AtomicLong();
            List<Thread> ts = new ArrayList<>();
            long t0 = System.nanoTime();
            for (int t = 0; t < threads; t++) {
                Thread th = new Thread(() -> {
                    while (left.getAndDecrement() > 0) {
                        try {
                            p.send(message(a[2], body));
                        } catch (Exception e) {
                            failed.incrementAndGet();
                        }
                    }
                });
                th.start();
                ts.add(th);
            }
            for (Thread t : ts) t.join();
            double secs = (System.nanoTime() - t0) / 1e9;
            result("threads", n, secs, ",\"failed\":" + failed.get() + ",\"warmup_msgs\":" + (WARMUP + 1));
        }
    }

    static void receive(String[] a) throws Exception {
        long n = Long.parseLong(a[4]);
        try (SimpleConsumer c = PROVIDER.newSimpleConsumerBuilder().setClientConfiguration(config(a[1]))
                .setConsumerGroup(a[3]).setAwaitDuration(Duration.ofSeconds(5))
                .setSubscriptionExpressions(Collections.singletonMap(a[2], FilterExpression.SUB_ALL))
                .build()) {
            timed();
            long got = 0, t0 = System.nanoTime(), end = t0 + 300_000_000_000L;
            while (got < n && System.nanoTime() < end) {
                List<MessageView> batch = c.receive(32, Duration.ofSeconds(30));
                List<CompletableFuture<Void>> acks = new ArrayList<>(batch.size());
                for (MessageView m : batch) acks.add(c.ackAsync(m));
                CompletableFuture.allOf(acks.toArray(new CompletableFuture[0])).get(30, TimeUnit.SECONDS);
                got += batch.size();
            }
            result("receive", got, (System.nanoTime() - t0) / 1e9, "");
        }
    }

    static void push(String[] a) throws Exception {
        long n = Long.parseLong(a[4]);
        CountDownLatch all = new CountDownLatch(1);
        AtomicLong got = new AtomicLong(), t0 = new AtomicLong();
        PushConsumer c = PROVIDER.newPushConsumerBuilder().setClientConfiguration(config(a[1]))
            .setConsumerGroup(a[3])
            .setSubscriptionExpressions(Collections.singletonMap(a[2], FilterExpression.SUB_ALL))
            .setMessageListener(m -> {
                long k = got.incrementAndGet();
                if (k == 1) {
                    t0.set(System.nanoTime());
                    timed();
                }
                if (k == n) all.countDown();
                return ConsumeResult.SUCCESS;
            }).build();
        try {
            boolean done = all.await(300, TimeUnit.SECONDS);
            double secs = (System.nanoTime() - t0.get()) / 1e9;
            result("push", done ? n : got.get(), secs, done ? "" : ",\"incomplete\":true");
        } finally {
            c.close();
        }
    }

    public static void main(String[] a) throws Exception {
        switch (a[0]) {
            case "sync": sync(a); break;
            case "threads": threads(a); break;
            case "receive": receive(a); break;
            case "push": push(a); break;
            default: throw new IllegalArgumentException("no command " + a[0]);
        }
        System.exit(0);  // the client's own threads would keep the JVM alive
    }
}
