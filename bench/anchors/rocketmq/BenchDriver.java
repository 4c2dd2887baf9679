// The workloads RocketMQ's benchmark Producer has no mode for (#29), run by RocketMQ's own
// Java remoting client against either broker: ledgermq or Apache RocketMQ, same client, same
// settings. One command a run; one JSON line out per result. Timing starts after a warm-up
// (the JIT and the route lookup are not what is measured).
//
//   sync     NAMESRV TOPIC COUNT SIZE              one thread, one message a request: p50/p99
//   batch    NAMESRV TOPIC COUNT SIZE BATCH THREADS  THREADS threads sending batches of BATCH
//   consume  NAMESRV TOPIC GROUP COUNT [OUT]       a lite pull consumer reads COUNT from the start
//                                                  (OUT: writes each body's text, a line each)
//   failover NAMESRV TOPIC OUT                     sync sends of numbered bodies in a loop; each
//                                                  line on stdin marks a kill and gets the time
//                                                  to the next SEND_OK; at stdin's end, writes
//                                                  the numbers acknowledged to OUT
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class BenchDriver {
    static final int WARMUP = 500;

    // the caller samples the brokers' CPU time here and at the result line
    static void timed() {
        System.out.println("{\"timed\":true}");
        System.out.flush();
    }

    static DefaultMQProducer producer(String namesrv, String group) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(group);
        p.setNamesrvAddr(namesrv);
        // routes every second rather than every 30 s, on both sides alike, so a failover row
        // measures the brokers and not the client's poll period
        p.setPollNameServerInterval(1000);
        p.start();
        return p;
    }

    // a group that has just elected its leader may time the first sends out: retried for
    // up to a minute (not counted: these are sent before the timed part)
    static void firstOk(DefaultMQProducer p, Message m) throws Exception {
        long end = System.nanoTime() + 60_000_000_000L;
        while (true) {
            try {
                if (p.send(m).getSendStatus() == SendStatus.SEND_OK) return;
            } catch (Exception e) {
                if (System.nanoTime() > end) throw e;
            }
            Thread.sleep(100);
        }
    }

    static double pct(long[] nanos, int n, double p) {
        long[] s = Arrays.copyOf(nanos, n);
        Arrays.sort(s);
        return s[Math.min(n - 1, (int) (p / 100 * (n - 1)))] / 1e6;
    }

    static void sync(String[] a) throws Exception {
        DefaultMQProducer p = producer(a[1], "bench-sync");
        int n = Integer.parseInt(a[3]);
        byte[] body = new byte[Integer.parseInt(a[4])];
        try {
            firstOk(p, new Message(a[2], body));
            for (int i = 0; i < WARMUP; i++) p.send(new Message(a[2], body));
            timed();
            long[] lat = new long[n];
            long t0 = System.nanoTime();
            for (int i = 0; i < n; i++) {
                long s = System.nanoTime();
                SendResult r = p.send(new Message(a[2], body));
                lat[i] = System.nanoTime() - s;
                if (r.getSendStatus() != SendStatus.SEND_OK) throw new IllegalStateException(r.toString());
            }
            double secs = (System.nanoTime() - t0) / 1e9;
            System.out.printf("{\"workload\":\"sync\",\"msgs\":%d,\"secs\":%.3f,\"msgs_per_s\":%.1f,"
                + "\"p50_ms\":%.3f,\"p99_ms\":%.3f}%n", n, secs, n / secs, pct(lat, n, 50), pct(lat, n, 99));
        } finally {
            p.shutdown();
        }
    }

    static void batch(String[] a) throws Exception {
        DefaultMQProducer p = producer(a[1], "bench-batch");
        int n = Integer.parseInt(a[3]), size = Integer.parseInt(a[4]);
        int per = Integer.parseInt(a[5]), threads = Integer.parseInt(a[6]);
        byte[] body = new byte[size];
        try {
            List<Message> warm = new ArrayList<>();
            for (int i = 0; i < per; i++) warm.add(new Message(a[2], body));
            firstOk(p, new Message(a[2], body));
            for (int i = 0; i < WARMUP / per + 1; i++) p.send(warm);
            timed();
            AtomicLong left = new AtomicLong(n / per);
            Thread[] ts = new Thread[threads];
            long t0 = System.nanoTime();
            for (int t = 0; t < threads; t++) {
                ts[t] = new Thread(() -> {
                    try {
                        while (left.getAndDecrement() > 0) {
                            List<Message> b = new ArrayList<>(per);
                            for (int i = 0; i < per; i++) b.add(new Message(a[2], body));
                            SendResult r = p.send(b);
                            if (r.getSendStatus() != SendStatus.SEND_OK) throw new IllegalStateException(r.toString());
                        }
                    } catch (Exception e) {
                        throw new RuntimeException(e);
                    }
                });
                ts[t].start();
            }
            for (Thread t : ts) t.join();
            double secs = (System.nanoTime() - t0) / 1e9;
            long sent = (long) (n / per) * per;
            System.out.printf("{\"workload\":\"batch\",\"msgs\":%d,\"secs\":%.3f,\"msgs_per_s\":%.1f,"
                + "\"warmup_msgs\":%d}%n", sent, secs, sent / secs, (WARMUP / per + 1) * per + 1);
        } finally {
            p.shutdown();
        }
    }

    static void consume(String[] a) throws Exception {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(a[3]);
        c.setNamesrvAddr(a[1]);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPullBatchSize(32);
        c.subscribe(a[2], "*");
        c.start();
        long want = Long.parseLong(a[4]), got = 0, t0 = 0, last = 0;
        long deadline = System.nanoTime() + 300_000_000_000L;
        PrintWriter out = a.length > 5 ? new PrintWriter(a[5], StandardCharsets.UTF_8) : null;
        timed();
        try {
            // past COUNT, on to the first empty poll: duplicates must not hide a missing one
            while (System.nanoTime() < deadline) {
                List<MessageExt> ms = c.poll(1000);
                if (ms.isEmpty() && got >= want) break;
                if (ms.isEmpty()) continue;
                if (t0 == 0) t0 = System.nanoTime();
                last = System.nanoTime();
                got += ms.size();
                if (out != null) {
                    for (MessageExt m : ms) out.println(new String(m.getBody(), StandardCharsets.UTF_8).trim());
                }
            }
            if (out != null) out.close();
            double secs = (last - t0) / 1e9;
            System.out.printf("{\"workload\":\"consume\",\"msgs\":%d,\"secs\":%.3f,\"msgs_per_s\":%.1f}%n",
                got, secs, got / secs);
        } finally {
            c.shutdown();
        }
    }

    static void failover(String[] a) throws Exception {
        DefaultMQProducer p = producer(a[1], "bench-failover");
        p.setSendMsgTimeout(1000);
        AtomicLong mark = new AtomicLong(0);
        java.util.concurrent.atomic.AtomicBoolean done = new java.util.concurrent.atomic.AtomicBoolean();
        Thread reader = new Thread(() -> {
            try {
                int ch;
                while ((ch = System.in.read()) >= 0) {
                    if (ch == '\n') mark.set(System.nanoTime());
                }
            } catch (java.io.IOException e) {
                // stdin broken: as closed
            }
            done.set(true);
        });
        reader.setDaemon(true);
        reader.start();
        List<Long> acked = new ArrayList<>();
        boolean ready = false;
        try {
            for (long seq = 0; !done.get(); seq++) {
                long start = System.nanoTime();
                // a numbered body, padded to 100 bytes
                byte[] body = String.format("%-100d", seq).getBytes(StandardCharsets.UTF_8);
                boolean ok;
                try {
                    ok = p.send(new Message(a[2], body)).getSendStatus() == SendStatus.SEND_OK;
                } catch (Exception e) {
                    ok = false;
                }
                if (ok) acked.add(seq);
                if (ok && !ready) {
                    ready = true;
                    System.out.println("{\"ready\":true}");
                    System.out.flush();
                }
                long m = mark.get();
                if (ok && m != 0 && start > m) {
                    System.out.printf("{\"first_ok_after_mark_s\":%.3f}%n", (System.nanoTime() - m) / 1e9);
                    System.out.flush();
                    mark.set(0);
                }
                if (!ok) Thread.sleep(10);
            }
        } finally {
            p.shutdown();
        }
        try (PrintWriter out = new PrintWriter(a[3], StandardCharsets.UTF_8)) {
            for (long seq : acked) out.println(seq);
        }
        System.out.printf("{\"acked\":%d}%n", acked.size());
    }

    public static void main(String[] a) throws Exception {
        switch (a[0]) {
            case "sync": sync(a); break;
            case "batch": batch(a); break;
            case "consume": consume(a); break;
            case "failover": failover(a); break;
            default: throw new IllegalArgumentException("no command " + a[0]);
        }
        System.exit(0);  // the client's threads are not all daemons
    }
}
