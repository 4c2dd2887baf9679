// RocketMQ 5's Go gRPC client (github.com/apache/rocketmq-clients/golang/v5) against a
// gRPC endpoint, for tests/compat/test_go_client.py (#30). The client always speaks TLS
// (its default config skips verifying the server's certificate). JSON lines out.
//
//	produce  ENDPOINT TOPIC COUNT WAY     WAY: normal fifo delay tx-commit tx-rollback tx-check
//	consume  ENDPOINT GROUP TOPIC COUNT SECS   a SimpleConsumer receives and acks COUNT
package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"

	"ledgermq/compat/cli"
)

func config(endpoint, group string) *rmq.Config {
	return &rmq.Config{Endpoint: endpoint, ConsumerGroup: group,
		Credentials: &credentials.SessionCredentials{}}
}

func produce(a []string) {
	topic, n, way := a[1], cli.Atoi(a[2]), a[3]
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
	cli.Must(err, "producer")
	cli.Must(p.Start(), "producer start")
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
			cli.Must(err, way+" send")
			switch way {
			case "tx-commit":
				cli.Must(tx.Commit(), "commit")
			case "tx-rollback":
				cli.Must(tx.RollBack(), "rollback")
			}
		} else {
			receipts, err = p.Send(ctx, m)
			cli.Must(err, way+" send")
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
	cli.Out(map[string]any{"way": way, "ids": ids, "checked": checked})
}

func consume(a []string) {
	group, topic, n, secs := a[1], a[2], cli.Atoi(a[3]), cli.Atoi(a[4])
	c, err := rmq.NewSimpleConsumer(config(a[0], group), rmq.WithAwaitDuration(2*time.Second),
		rmq.WithSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	cli.Must(err, "simple consumer")
	cli.Must(c.Start(), "simple consumer start")
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
			cli.Must(c.Ack(ctx, mv), "ack")
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
	cli.Out(map[string]any{"messages": got})
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
		cli.Must(fmt.Errorf("no command %q (have produce consume)", a[0]), "usage")
	}
}
