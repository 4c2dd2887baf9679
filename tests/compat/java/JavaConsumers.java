// RocketMQ's Java remoting client's consumers beyond JavaClient.java's push and lite pull,
// driven from tests/compat/test_java_consumers.py (#30): orderly and broadcasting push
// consumers, the dead-letter queue after maxReconsumeTimes, SQL92 selectors, the lite pull
// consumer's assign mode with seek and commit, DefaultMQPullConsumer, and 5.x's timer
// properties. One command a run; one JSON line out per result.
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

public class JavaConsumers {
    static String json(String... kv) {
        StringBuilder b = new StringBuilder("{");
        for (int i = 0; i < kv.length; i += 2) {
            if (i > 0) b.append(',');
            b.append('"').append(kv[i]).append("\":\"")
             .append(kv[i + 1].replace("\\", "\\\\").replace("\"", "\\\"")).append('"');
        }
        return b.append('}').toString();
    }

    static String body(MessageExt m) {
        return new String(m.getBody(), StandardCharsets.UTF_8);
    }

    static String seen(String who, MessageExt m) {
        return json("who", who, "body", body(m), "queueId", String.valueOf(m.getQueueId()),
            "offset", String.valueOf(m.getQueueOffset()),
            "at", String.valueOf(System.currentTimeMillis()));
    }

    static DefaultMQPushConsumer push(String ns, String group, String instance) {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setInstanceName(instance);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPollNameServerInterval(1000);
        return c;
    }

    // (MessageModel moved package between 4.9 and 5: found through the setter's type)
    @SuppressWarnings({"unchecked", "rawtypes"})
    static void broadcasting(DefaultMQPushConsumer c) throws Exception {
        Class model = DefaultMQPushConsumer.class.getMethod("getMessageModel").getReturnType();
        c.getClass().getMethod("setMessageModel", model)
            .invoke(c, Enum.valueOf(model, "BROADCASTING"));
    }

    static void await(Collection<?> got, int want, String seconds) throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(Long.parseLong(seconds));
        while (got.size() < want && System.nanoTime() < until) Thread.sleep(50);
    }

    // send NAMESRV TOPIC COUNT: sync sends "m-i", tag "even"/"odd", user property n=i
    static void send(String[] a) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("java-consumers-producer");
        p.setNamesrvAddr(a[1]);
        p.start();
        try {
            for (int i = 0; i < Integer.parseInt(a[3]); i++) {
                Message m = new Message(a[2], i % 2 == 0 ? "even" : "odd",
                    ("m-" + i).getBytes(StandardCharsets.UTF_8));
                m.putUserProperty("n", String.valueOf(i));
                p.send(m, (mqs, msg, key) -> mqs.get(0), null);  // one queue: one order
            }
        } finally {
            p.shutdown();
        }
    }

    // orderly NAMESRV GROUP TOPIC COUNT SECONDS SUSPEND: MessageListenerOrderly; with
    // SUSPEND the first message is suspended once (SUSPEND_CURRENT_QUEUE_A_MOMENT: the queue
    // holds back until it is consumed again); the bodies in consumption order
    static void orderly(String[] a) throws Exception {
        DefaultMQPushConsumer c = push(a[1], a[2], "orderly");
        c.subscribe(a[3], "*");
        ConcurrentLinkedQueue<String> got = new ConcurrentLinkedQueue<>();
        boolean[] suspended = {!Boolean.parseBoolean(a[6])};
        c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                if (!suspended[0]) {
                    suspended[0] = true;
                    return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
                }
                got.add(seen("orderly", m));
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        c.start();
        await(got, Integer.parseInt(a[4]), a[5]);
        for (String line : got) System.out.println(line);
        System.out.flush();
        c.shutdown();
    }

    // broadcast NAMESRV GROUP TOPIC COUNT SECONDS: two BROADCASTING consumers of one group
    // (two instances in this JVM); each must get every message
    static void broadcast(String[] a) throws Exception {
        ConcurrentLinkedQueue<String> got = new ConcurrentLinkedQueue<>();
        List<DefaultMQPushConsumer> cs = new ArrayList<>();
        for (String who : new String[] {"b1", "b2"}) {
            DefaultMQPushConsumer c = push(a[1], a[2], who);
            broadcasting(c);
            c.subscribe(a[3], "*");
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) got.add(seen(who, m));
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            cs.add(c);
        }
        await(got, 2 * Integer.parseInt(a[4]), a[5]);
        for (DefaultMQPushConsumer c : cs) c.shutdown();
        for (String line : got) System.out.println(line);
    }

    // dlq NAMESRV GROUP TOPIC COUNT SECONDS: every delivery fails (maxReconsumeTimes 1):
    // each message is seen twice and then left to the group's %DLQ%
    static void dlq(String[] a) throws Exception {
        DefaultMQPushConsumer c = push(a[1], a[2], "dlq");
        c.setMaxReconsumeTimes(1);
        c.subscribe(a[3], "*");
        ConcurrentLinkedQueue<String> got = new ConcurrentLinkedQueue<>();
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) got.add(json("body", body(m),
                "reconsumeTimes", String.valueOf(m.getReconsumeTimes())));
            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
        });
        c.start();
        await(got, 2 * Integer.parseInt(a[4]), a[5]);
        c.shutdown();
        for (String line : got) System.out.println(line);
    }

    // sql NAMESRV GROUP TOPIC EXPRESSION COUNT SECONDS: MessageSelector.bySql
    static void sql(String[] a) throws Exception {
        DefaultMQPushConsumer c = push(a[1], a[2], "sql");
        c.subscribe(a[3], MessageSelector.bySql(a[4]));
        ConcurrentLinkedQueue<String> got = new ConcurrentLinkedQueue<>();
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) got.add(seen("sql", m));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        await(got, Integer.parseInt(a[5]), a[6]);
        c.shutdown();
        for (String line : got) System.out.println(line);
    }

    // assign NAMESRV GROUP TOPIC SEEK: a DefaultLitePullConsumer in assign mode: every queue
    // assigned, queue 0 sought to offset SEEK, polled to its end, committed by hand; the
    // bodies and the committed offset the broker then reports
    static void assign(String[] a) throws Exception {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(a[2]);
        c.setNamesrvAddr(a[1]);
        c.setAutoCommit(false);
        c.start();
        try {
            List<MessageQueue> mqs = new ArrayList<>(c.fetchMessageQueues(a[3]));
            mqs.sort((x, y) -> Integer.compare(x.getQueueId(), y.getQueueId()));
            MessageQueue q0 = mqs.get(0);
            c.assign(List.of(q0));
            c.seek(q0, Long.parseLong(a[4]));
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            int empty = 0;
            while (empty < 3 && System.nanoTime() < until) {
                List<MessageExt> ms = c.poll(500);
                empty = ms.isEmpty() ? empty + 1 : 0;
                for (MessageExt m : ms) System.out.println(seen("assign", m));
            }
            c.commitSync();
            System.out.println(json("committed", String.valueOf(c.committed(q0))));
        } finally {
            c.shutdown();
        }
    }

    // pull NAMESRV GROUP TOPIC: DefaultMQPullConsumer: each queue pulled from 0 to its end
    @SuppressWarnings("deprecation")
    static void pull(String[] a) throws Exception {
        DefaultMQPullConsumer c = new DefaultMQPullConsumer(a[2]);
        c.setNamesrvAddr(a[1]);
        c.start();
        try {
            for (MessageQueue q : c.fetchSubscribeMessageQueues(a[3])) {
                long offset = 0;
                while (true) {
                    PullResult r = c.pull(q, "*", offset, 32);
                    if (r.getPullStatus() != PullStatus.FOUND) break;
                    for (MessageExt m : r.getMsgFoundList()) System.out.println(seen("pull", m));
                    offset = r.getNextBeginOffset();
                }
            }
        } finally {
            c.shutdown();
        }
    }

    // timer NAMESRV TOPIC DELAY_MS: one message with 5.x's setDeliverTimeMs (4.9 has no
    // such method: the TIMER_DELIVER_MS property it sets); when it was sent
    static void timer(String[] a) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("java-consumers-timer");
        p.setNamesrvAddr(a[1]);
        p.start();
        try {
            Message m = new Message(a[2], "timer".getBytes(StandardCharsets.UTF_8));
            long at = System.currentTimeMillis() + Long.parseLong(a[3]);
            try {
                Message.class.getMethod("setDeliverTimeMs", long.class).invoke(m, at);
            } catch (NoSuchMethodException e) {
                m.putUserProperty("TIMER_DELIVER_MS", String.valueOf(at));
            }
            p.send(m);
            System.out.println(json("due", String.valueOf(at)));
        } finally {
            p.shutdown();
        }
    }

    public static void main(String[] a) throws Exception {
        switch (a[0]) {
            case "send": send(a); break;
            case "orderly": orderly(a); break;
            case "broadcast": broadcast(a); break;
            case "dlq": dlq(a); break;
            case "sql": sql(a); break;
            case "assign": assign(a); break;
            case "pull": pull(a); break;
            case "timer": timer(a); break;
            default: throw new IllegalArgumentException("unknown command " + a[0]);
        }
        // (5.5.0's orderly consume service leaves a non-daemon scheduled thread running
        // after shutdown(): the JVM would not end on its own)
        System.exit(0);
    }
}
