// RocketMQ's Go remoting client (github.com/apache/rocketmq-client-go/v2) against a broker,
// for tests/compat/test_go_client.py (#30). One command a run; JSON lines out.
//
//	create   NAMESRV BROKER TOPIC QUEUES         admin.CreateTopic, then the route's queues
//	produce  NAMESRV TOPIC COUNT WAY             WAY: sync async oneway batch orderly delay tag
//	tx       NAMESRV TOPIC                       commit, rollback, and one left to check-back
//	push     NAMESRV GROUP TOPIC EXPR COUNT SECS [retry|broadcast|dlq]
//	pull     NAMESRV GROUP TOPIC COUNT SECS      a pull consumer reads every queue from 0
//	failover NAMESRV TOPIC OUT                   BenchDriver.java's failover, on this client
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"ledgermq/compat/cli"
)

func create(a []string) {
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver([]string{a[0]})))
	cli.Must(err, "admin")
	defer adm.Close()
	ctx := context.Background()
	q := cli.Atoi(a[3])
	cli.Must(adm.CreateTopic(ctx, admin.WithTopicCreate(a[2]), admin.WithBrokerAddrCreate(a[1]),
		admin.WithReadQueueNums(q), admin.WithWriteQueueNums(q)), "CreateTopic")
	// the route comes from the name server once the broker registered the topic again
	deadline := time.Now().Add(20 * time.Second)
	for {
		mqs, err := adm.FetchPublishMessageQueues(ctx, a[2])
		if err == nil && len(mqs) == q {
			cli.Out(map[string]any{"created": a[2], "queues": len(mqs)})
			return
		}
		if time.Now().After(deadline) {
			cli.Must(fmt.Errorf("%d queues, %v", len(mqs), err), "route of "+a[2])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func message(topic string, i int) *primitive.Message {
	m := primitive.NewMessage(topic, []byte(fmt.Sprintf("go-%d", i)))
	m.WithKeys([]string{fmt.Sprintf("gokey-%d", i)})
	return m
}

func produce(a []string) {
	topic, n, way := a[1], cli.Atoi(a[2]), a[3]
	opts := []producer.Option{producer.WithNameServer([]string{a[0]}), producer.WithRetry(2),
		producer.WithGroupName("go-producer-" + way)}
	if way == "orderly" {
		opts = append(opts, producer.WithQueueSelector(producer.NewHashQueueSelector()))
	}
	p, err := rocketmq.NewProducer(opts...)
	cli.Must(err, "producer")
	cli.Must(p.Start(), "producer start")
	defer p.Shutdown()
	ctx := context.Background()
	sent := []map[string]any{}
	record := func(r *primitive.SendResult) {
		sent = append(sent, map[string]any{"status": int(r.Status), "id": r.MsgID,
			"offset_id": r.OffsetMsgID,
			"queue":     r.MessageQueue.QueueId, "offset": r.QueueOffset})
	}
	switch way {
	case "batch":
		msgs := []*primitive.Message{}
		for i := 0; i < n; i++ {
			msgs = append(msgs, message(topic, i))
		}
		r, err := p.SendSync(ctx, msgs...)
		cli.Must(err, "batch send")
		record(r)
	case "async":
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failed error
		for i := 0; i < n; i++ {
			wg.Add(1)
			cli.Must(p.SendAsync(ctx, func(_ context.Context, r *primitive.SendResult, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed = err
				} else {
					record(r)
				}
				wg.Done()
			}, message(topic, i)), "async send")
		}
		wg.Wait()
		cli.Must(failed, "async result")
	case "oneway":
		for i := 0; i < n; i++ {
			cli.Must(p.SendOneWay(ctx, message(topic, i)), "oneway send")
		}
	default:
		for i := 0; i < n; i++ {
			m := message(topic, i)
			switch way {
			case "orderly":
				m.WithShardingKey(fmt.Sprintf("order-%d", i%3))
			case "delay":
				m.WithDelayTimeLevel(2)
			case "tag":
				m.WithTag([]string{"TagA", "TagB"}[i%2])
			}
			r, err := p.SendSync(ctx, m)
			cli.Must(err, way+" send")
			record(r)
		}
	}
	cli.Out(map[string]any{"way": way, "sent": sent})
}

// commits "tx-commit", rolls back "tx-rollback", leaves "tx-check" unknown: the broker asks
// back and the answer is commit
type txListener struct {
	mu      sync.Mutex
	checked []string
}

func (l *txListener) ExecuteLocalTransaction(m *primitive.Message) primitive.LocalTransactionState {
	switch string(m.Body) {
	case "tx-commit":
		return primitive.CommitMessageState
	case "tx-rollback":
		return primitive.RollbackMessageState
	}
	return primitive.UnknowState
}

func (l *txListener) CheckLocalTransaction(m *primitive.MessageExt) primitive.LocalTransactionState {
	l.mu.Lock()
	l.checked = append(l.checked, string(m.Body))
	l.mu.Unlock()
	return primitive.CommitMessageState
}

func tx(a []string) {
	l := &txListener{}
	p, err := rocketmq.NewTransactionProducer(l, producer.WithNameServer([]string{a[0]}),
		producer.WithGroupName("go-tx-producer"))
	cli.Must(err, "transaction producer")
	cli.Must(p.Start(), "transaction producer start")
	defer p.Shutdown()
	states := map[string]int{}
	for _, body := range []string{"tx-commit", "tx-rollback", "tx-check"} {
		r, err := p.SendMessageInTransaction(context.Background(),
			primitive.NewMessage(a[1], []byte(body)))
		cli.Must(err, "transaction send "+body)
		states[body] = int(r.State)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		n := len(l.checked)
		l.mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	cli.Out(map[string]any{"states": states, "checked": l.checked})
}

// collects COUNT bodies (or what came within SECS); "retry" fails each message's first
// delivery so it comes back through the group's retry topic
func push(a []string) {
	group, topic, expr, n, secs := a[1], a[2], a[3], cli.Atoi(a[4]), cli.Atoi(a[5])
	mode := ""
	if len(a) > 6 {
		mode = a[6]
	}
	opts := []consumer.Option{consumer.WithNameServer([]string{a[0]}), consumer.WithGroupName(group),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset)}
	if mode == "broadcast" {
		opts = append(opts, consumer.WithConsumerModel(consumer.BroadCasting))
	}
	if mode == "dlq" { // every delivery fails: after one retry the broker dead-letters it
		opts = append(opts, consumer.WithMaxReconsumeTimes(1))
	}
	c, err := rocketmq.NewPushConsumer(opts...)
	cli.Must(err, "push consumer")
	var mu sync.Mutex
	bodies, attempts := []string{}, map[string]int32{}
	done := make(chan struct{})
	cli.Must(c.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: expr},
		func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				if mode == "dlq" || mode == "retry" && m.ReconsumeTimes == 0 {
					attempts[string(m.Body)] = m.ReconsumeTimes
					return consumer.ConsumeRetryLater, nil
				}
			}
			for _, m := range msgs {
				bodies = append(bodies, string(m.Body))
				attempts[string(m.Body)] = m.ReconsumeTimes
				if len(bodies) == n {
					close(done)
				}
			}
			return consumer.ConsumeSuccess, nil
		}), "subscribe")
	cli.Must(c.Start(), "push consumer start")
	select {
	case <-done:
	case <-time.After(time.Duration(secs) * time.Second):
	}
	mu.Lock()
	sort.Strings(bodies)
	cli.Out(map[string]any{"bodies": bodies, "reconsume_times": attempts})
	mu.Unlock()
	c.Shutdown()
}

func pull(a []string) {
	group, topic, n, secs := a[1], a[2], cli.Atoi(a[3]), cli.Atoi(a[4])
	c, err := rocketmq.NewPullConsumer(consumer.WithNameServer([]string{a[0]}),
		consumer.WithGroupName(group))
	cli.Must(err, "pull consumer")
	cli.Must(c.Subscribe(topic, consumer.MessageSelector{}), "subscribe")
	cli.Must(c.Start(), "pull consumer start")
	defer c.Shutdown()
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver([]string{a[0]})))
	cli.Must(err, "admin")
	defer adm.Close()
	ctx := context.Background()
	mqs, err := adm.FetchPublishMessageQueues(ctx, topic)
	cli.Must(err, "queues")
	bodies := []string{}
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	for _, mq := range mqs {
		offset := int64(0)
		for len(bodies) < n && time.Now().Before(deadline) {
			r, err := c.PullFrom(ctx, mq, offset, 32)
			cli.Must(err, "pull")
			if r.Status != primitive.PullFound {
				break
			}
			for _, m := range r.GetMessageExts() {
				bodies = append(bodies, string(m.Body))
			}
			offset = r.NextBeginOffset
			if offset >= r.MaxOffset { // (a pull past the end waits for new messages)
				break
			}
		}
	}
	sort.Strings(bodies)
	cli.Out(map[string]any{"bodies": bodies, "queues": len(mqs)})
}

// sync sends of numbered bodies in a loop; each line on stdin marks a kill and gets the
// seconds to the next SEND_OK; at stdin's end, the numbers acknowledged go to OUT (as
// bench/anchors/rocketmq/BenchDriver.java's failover, for the same harness)
func failover(a []string) {
	p, err := rocketmq.NewProducer(producer.WithNameServer([]string{a[0]}), producer.WithRetry(0),
		producer.WithSendMsgTimeout(time.Second), producer.WithGroupName("go-failover"))
	cli.Must(err, "producer")
	cli.Must(p.Start(), "producer start")
	var mark atomic.Int64
	var done atomic.Bool
	go func() {
		buf := make([]byte, 1)
		for {
			if n, err := os.Stdin.Read(buf); err != nil {
				done.Store(true)
				return
			} else if n == 1 && buf[0] == '\n' {
				mark.Store(time.Now().UnixNano())
			}
		}
	}()
	acked, ready := []string{}, false
	for seq := 0; !done.Load(); seq++ {
		start := time.Now().UnixNano()
		r, err := p.SendSync(context.Background(),
			primitive.NewMessage(a[1], []byte(fmt.Sprintf("%-100d", seq))))
		ok := err == nil && r.Status == primitive.SendOK
		if ok {
			acked = append(acked, strconv.Itoa(seq))
			if !ready {
				ready = true
				cli.Out(map[string]any{"ready": true})
			}
			if m := mark.Load(); m != 0 && start > m {
				cli.Out(map[string]any{"first_ok_after_mark_s": float64(time.Now().UnixNano()-m) / 1e9})
				mark.Store(0)
			}
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	p.Shutdown()
	cli.Must(os.WriteFile(a[2], []byte(strings.Join(acked, "\n")+"\n"), 0o644), "acked file")
	cli.Out(map[string]any{"acked": len(acked)})
}

func main() {
	rlog.SetLogLevel("error")
	a := os.Args[1:]
	commands := map[string]func([]string){"create": create, "produce": produce, "tx": tx,
		"push": push, "pull": pull, "failover": failover}
	run, ok := commands[a[0]]
	if !ok {
		cli.Must(fmt.Errorf("no command %q (have create produce tx push pull failover)", a[0]), strings.Join(a, " "))
	}
	run(a[1:])
}
