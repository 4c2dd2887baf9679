// RocketMQ 5's Go gRPC client (github.com/apache/rocketmq-clients/golang/v5) against a
// gRPC endpoint, for tests/compat/test_go_client.py (#30). The client always speaks TLS
// (its default config skips verifying the server's certificate). JSON lines out.
//
//	produce  ENDPOINT TOPIC COUNT WAY     WAY: normal fifo delay tx-commit tx-rollback tx-check
//	consume  ENDPOINT GROUP TOPIC COUNT SECS   a SimpleConsumer receives and acks COUNT
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
)

func out(v map[string]any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

func must(err error, what string) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		os.Exit(1)
	}
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	must(err, "number "+s)
	return n
}

func config(endpoint, group string) *rmq.Config {
	return &rmq.Config{Endpoint: endpoint, ConsumerGroup: group,
		Credentials: &credentials.SessionCredentials{}}
}

func produce(a []string) {
	topic, n, way := a[1], atoi(a[2]), a[3]
	var mu sync.Mutex
	checked := []string{}
	p, err := rmq.NewProducer(config(a[0], ""), rmq.WithTopics(topic),
		rmq.WithTransactionChecker(&rmq.TransactionChecker{
			Check: func(m *rmq.MessageView) rmq.TransactionResolution {
				mu.Lock()
				checked = append(checked, string(m.GetBody()))
				mu.Unlock()
				return rmq.COMMIT
			}}))
	must(err, "producer")
	must(p.Start(), "producer start")
	defer p.GracefulStop()
	ctx := context.Background()
	ids := []string{}
	for i := 0; i < n; i++ {
		m := &rmq.Message{Topic: topic, Body: []byte(fmt.Sprintf("%s-%d", way, i))}
		m.SetKeys(fmt.Sprintf("key-%d", i))
		m.SetTag("TagGo")
		var receipts []*rmq.SendReceipt
		switch way {
		case "fifo":
			m.SetMessageGroup(fmt.Sprintf("group-%d", i%2))
		case "delay":
			m.SetDelayTimestamp(time.Now().Add(2 * time.Second))
		}
		if way == "tx-commit" || way == "tx-rollback" || way == "tx-check" {
			tx := p.BeginTransaction()
			receipts, err = p.SendWithTransaction(ctx, m, tx)
			must(err, way+" send")
			switch way {
			case "tx-commit":
				must(tx.Commit(), "commit")
			case "tx-rollback":
				must(tx.RollBack(), "rollback")
			}
		} else {
			receipts, err = p.Send(ctx, m)
			must(err, way+" send")
		}
		ids = append(ids, receipts[0].MessageID)
	}
	if way == "tx-check" { // the broker asks back about the transaction left open
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			k := len(checked)
			mu.Unlock()
			if k >= n {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	out(map[string]any{"way": way, "ids": ids, "checked": checked})
}

func consume(a []string) {
	group, topic, n, secs := a[1], a[2], atoi(a[3]), atoi(a[4])
	c, err := rmq.NewSimpleConsumer(config(a[0], group), rmq.WithAwaitDuration(2*time.Second),
		rmq.WithSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	must(err, "simple consumer")
	must(c.Start(), "simple consumer start")
	defer c.GracefulStop()
	ctx := context.Background()
	got := []map[string]any{}
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		mvs, err := c.Receive(ctx, 16, 20*time.Second)
		if err != nil { // "no new message" comes back as an error when the wait ends
			continue
		}
		for _, mv := range mvs {
			must(c.Ack(ctx, mv), "ack")
			tag := ""
			if mv.GetTag() != nil {
				tag = *mv.GetTag()
			}
			group := ""
			if mv.GetMessageGroup() != nil {
				group = *mv.GetMessageGroup()
			}
			got = append(got, map[string]any{"body": string(mv.GetBody()), "id": mv.GetMessageId(),
				"tag": tag, "keys": mv.GetKeys(), "group": group,
				"attempt": mv.GetDeliveryAttempt(), "at": float64(time.Now().UnixMilli()) / 1000})
		}
	}
	out(map[string]any{"messages": got})
}

func main() {
	os.Setenv("rocketmq.client.logRoot", os.TempDir())
	a := os.Args[1:]
	switch a[0] {
	case "produce":
		produce(a[1:])
	case "consume":
		consume(a[1:])
	default:
		must(fmt.Errorf("no command %q (have produce consume)", a[0]), "usage")
	}
}
