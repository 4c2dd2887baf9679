// RocketMQ's Java remoting client (org.apache.rocketmq:rocketmq-client, from Maven Central
// through the anchor's pom) driven from tests/compat/test_java_client.py. One command a run,
// one JSON line out per result. Run with `java -cp CLASSPATH JavaClient.java COMMAND ...`.
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class JavaClient {
    static String json(String... kv) {
        StringBuilder b = new StringBuilder("{");
        for (int i = 0; i < kv.length; i += 2) {
            if (i > 0) b.append(',');
            b.append('"').append(kv[i]).append("\":\"")
             .append(kv[i + 1].replace("\\", "\\\\").replace("\"", "\\\"")
                     .replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t"))
             .append('"');
        }
        return b.append('}').toString();
    }

    static void print(SendResult r) {
        System.out.println(json("status", r.getSendStatus().name(), "msgId", r.getMsgId(),
            "queueId", String.valueOf(r.getMessageQueue().getQueueId()),
            "queueOffset", String.valueOf(r.getQueueOffset())));
    }

    // produce NAMESRV TOPIC COUNT TAG: sync sends, then one batch of COUNT more
    static void produce(String[] a) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("java-compat-producer");
        p.setNamesrvAddr(a[1]);
        p.start();
        try {
            int n = Integer.parseInt(a[3]);
            for (int i = 0; i < n; i++) {
                Message m = new Message(a[2], a[4], "key-" + i,
                    ("sync-" + i).getBytes(StandardCharsets.UTF_8));
                print(p.send(m));
            }
            List<Message> batch = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                batch.add(new Message(a[2], a[4], ("batch-" + i).getBytes(StandardCharsets.UTF_8)));
            }
            print(p.send(batch));
        } finally {
            p.shutdown();
        }
    }

    // push NAMESRV GROUP TOPIC TAGS COUNT SECONDS FAIL_FIRST: a push consumer; with
    // FAIL_FIRST each message is failed once (RECONSUME_LATER: back through %RETRY%)
    static void push(String[] a) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(a[2]);
        c.setNamesrvAddr(a[1]);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        // the group's retry topic is routed after the start: look it up each second, not 30
        c.setPollNameServerInterval(1000);
        c.subscribe(a[3], a[4]);
        int want = Integer.parseInt(a[5]);
        boolean failFirst = Boolean.parseBoolean(a[7]);
        ConcurrentLinkedQueue<String> got = new ConcurrentLinkedQueue<>();
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                if (failFirst && m.getReconsumeTimes() == 0) {
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
            }
            for (MessageExt m : msgs) {
                got.add(json("body", new String(m.getBody(), StandardCharsets.UTF_8),
                    "tags", String.valueOf(m.getTags()),
                    "reconsumeTimes", String.valueOf(m.getReconsumeTimes())));
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(Long.parseLong(a[6]));
        while (got.size() < want && System.nanoTime() < until) {
            Thread.sleep(50);
        }
        c.shutdown();
        for (String line : got) System.out.println(line);
    }

    // admin CMD ARGS... [--- CMD ARGS...]...: mqadmin commands (MQAdminStartup) in this one
    // JVM, each one's output (stdout and stderr) as {"command", "out"}
    static void admin(String[] a) throws Exception {
        java.io.PrintStream out = System.out, err = System.err;
        List<String> cmd = new ArrayList<>();
        for (int i = 1; i <= a.length; i++) {
            if (i < a.length && !a[i].equals("---")) {
                cmd.add(a[i]);
                continue;
            }
            java.io.ByteArrayOutputStream buf = new java.io.ByteArrayOutputStream();
            java.io.PrintStream capture = new java.io.PrintStream(buf, true, "UTF-8");
            System.setOut(capture);
            System.setErr(capture);
            try {
                org.apache.rocketmq.tools.command.MQAdminStartup.main0(
                    cmd.toArray(new String[0]), null);
            } catch (Throwable t) {
                t.printStackTrace(capture);
            } finally {
                System.setOut(out);
                System.setErr(err);
            }
            out.println(json("command", cmd.get(0), "out", buf.toString("UTF-8")));
            cmd.clear();
        }
    }

    // kinds NAMESRV TOPIC SECONDS: async, oneway, orderly (a MessageQueueSelector), delayed
    // and transactional sends (commit, rollback, and one left unknown for the check-back to
    // commit), waiting up to SECONDS for that check-back
    static void kinds(String[] a) throws Exception {
        String ns = a[1], topic = a[2];
        DefaultMQProducer p = new DefaultMQProducer("java-compat-kinds");
        p.setNamesrvAddr(ns);
        p.start();
        java.util.concurrent.CountDownLatch done = new java.util.concurrent.CountDownLatch(2);
        for (int i = 0; i < 2; i++) {
            p.send(new Message(topic, "async-" + i, ("async-" + i).getBytes(StandardCharsets.UTF_8)),
                new org.apache.rocketmq.client.producer.SendCallback() {
                    public void onSuccess(SendResult r) { print(r); done.countDown(); }
                    public void onException(Throwable e) {
                        System.out.println(json("error", e.toString())); done.countDown();
                    }
                });
        }
        done.await(30, TimeUnit.SECONDS);
        p.sendOneway(new Message(topic, "oneway", "oneway".getBytes(StandardCharsets.UTF_8)));
        for (int i = 0; i < 3; i++) {  // one order key: one queue, in order
            print(p.send(new Message(topic, "orderly", ("orderly-" + i).getBytes(StandardCharsets.UTF_8)),
                (mqs, msg, key) -> mqs.get(Math.abs(key.hashCode()) % mqs.size()), "order-key"));
        }
        Message delayed = new Message(topic, "delayed", "delayed".getBytes(StandardCharsets.UTF_8));
        delayed.setDelayTimeLevel(1);
        print(p.send(delayed));
        p.shutdown();

        org.apache.rocketmq.client.producer.TransactionMQProducer tx =
            new org.apache.rocketmq.client.producer.TransactionMQProducer("java-compat-tx");
        tx.setNamesrvAddr(ns);
        final boolean[] checked = {false};
        tx.setTransactionListener(new org.apache.rocketmq.client.producer.TransactionListener() {
            public org.apache.rocketmq.client.producer.LocalTransactionState executeLocalTransaction(
                    Message msg, Object arg) {
                String body = new String(msg.getBody(), StandardCharsets.UTF_8);
                return body.equals("tx-commit")
                    ? org.apache.rocketmq.client.producer.LocalTransactionState.COMMIT_MESSAGE
                    : body.equals("tx-rollback")
                    ? org.apache.rocketmq.client.producer.LocalTransactionState.ROLLBACK_MESSAGE
                    : org.apache.rocketmq.client.producer.LocalTransactionState.UNKNOW;
            }
            public org.apache.rocketmq.client.producer.LocalTransactionState checkLocalTransaction(
                    MessageExt msg) {
                System.out.println(json("checked", new String(msg.getBody(), StandardCharsets.UTF_8),
                                        "topic", msg.getTopic()));
                checked[0] = true;
                return org.apache.rocketmq.client.producer.LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        tx.start();
        for (String body : new String[] {"tx-commit", "tx-rollback", "tx-unknown"}) {
            tx.sendMessageInTransaction(new Message(topic, "tx", body.getBytes(StandardCharsets.UTF_8)), null);
        }

        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(Long.parseLong(a[3]));
        while (!checked[0] && System.nanoTime() < until) {  // the open one's check-back
            Thread.sleep(50);
        }
        tx.shutdown();
    }

    // lite NAMESRV GROUP TOPIC COUNT SECONDS: a DefaultLitePullConsumer (subscribe mode,
    // offsets auto-committed) reads until COUNT messages or SECONDS
    static void lite(String[] a) throws Exception {
        org.apache.rocketmq.client.consumer.DefaultLitePullConsumer c =
            new org.apache.rocketmq.client.consumer.DefaultLitePullConsumer(a[2]);
        c.setNamesrvAddr(a[1]);
        c.setPollNameServerInterval(1000);
        c.subscribe(a[3], "*");
        c.start();
        int want = Integer.parseInt(a[4]), got = 0;
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(Long.parseLong(a[5]));
        while (got < want && System.nanoTime() < until) {
            for (MessageExt m : c.poll(500)) {
                got++;
                System.out.println(json("read", new String(m.getBody(), StandardCharsets.UTF_8),
                    "queueId", String.valueOf(m.getQueueId())));
            }
        }
        c.shutdown();
    }

    // acl NAMESRV TOPIC ACCESS_KEY SECRET_KEY: one sync send signed by AclClientRPCHook
    // (ACCESS_KEY "-": unsigned); the outcome, and the broker's reason when refused
    static void acl(String[] a) throws Exception {
        org.apache.rocketmq.remoting.RPCHook hook = a[3].equals("-") ? null :
            new org.apache.rocketmq.acl.common.AclClientRPCHook(
                new org.apache.rocketmq.acl.common.SessionCredentials(a[3], a[4]));
        DefaultMQProducer p = new DefaultMQProducer("java-acl-producer", hook);
        p.setNamesrvAddr(a[1]);
        p.setRetryTimesWhenSendFailed(0);
        p.start();
        try {
            SendResult r = p.send(new Message(a[2], "acl".getBytes(StandardCharsets.UTF_8)), 10_000);
            System.out.println(json("ok", "true", "status", r.getSendStatus().name()));
        } catch (Exception e) {
            StringBuilder why = new StringBuilder();  // the broker's remark is in a cause
            for (Throwable t = e; t != null; t = t.getCause()) why.append(t.getMessage()).append(" | ");
            System.out.println(json("ok", "false", "error", why.toString()));
        } finally {
            p.shutdown();
        }
    }

    // create-topic NAMESRV KEY TOPIC QUEUES: DefaultMQAdminExt.createTopic(KEY, ...), which
    // creates TOPIC on every broker of KEY's route (a cluster's name, as RocketMQ's own
    // end-to-end suite passes it); then the topic's route
    static void createTopic(String[] a) throws Exception {
        org.apache.rocketmq.tools.admin.DefaultMQAdminExt admin =
            new org.apache.rocketmq.tools.admin.DefaultMQAdminExt();
        admin.setNamesrvAddr(a[1]);
        admin.start();
        try {
            int n = Integer.parseInt(a[4]);
            // (4.9's createTopic(key, topic, n); 5's takes the topic's attributes too)
            for (java.lang.reflect.Method m : admin.getClass().getMethods()) {
                Class<?>[] p = m.getParameterTypes();
                if (!m.getName().equals("createTopic")) continue;
                if (p.length == 3) m.invoke(admin, a[2], a[3], n);
                if (p.length == 4 && p[3] == java.util.Map.class) {
                    m.invoke(admin, a[2], a[3], n, new java.util.HashMap<String, String>());
                }
            }
            int queues = 0;
            for (var q : admin.examineTopicRouteInfo(a[3]).getQueueDatas()) {
                queues += q.getWriteQueueNums();
            }
            System.out.println(json("created", a[3], "writeQueues", String.valueOf(queues)));
        } finally {
            admin.shutdown();
        }
    }

    public static void main(String[] a) throws Exception {
        switch (a[0]) {
            case "produce": produce(a); break;
            case "push": push(a); break;
            case "admin": admin(a); break;
            case "kinds": kinds(a); break;
            case "lite": lite(a); break;
            case "acl": acl(a); break;
            case "create-topic": createTopic(a); break;
            default: throw new IllegalArgumentException("unknown command " + a[0]);
        }
        System.exit(0);
    }
}
