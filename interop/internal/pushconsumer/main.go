// Command pushconsumer runs one rocketmq-client-go push consumer until
// SIGTERM or SIGINT, printing every message it receives as a line
//
//	MSG <msgId> <queueId> <queueOffset> <reconsumeTimes> <body>
//
// then shuts the consumer down (committing its offsets) and prints
// "SHUTDOWN". The interop tests run it as a process where a test stops a
// consumer: the client's Shutdown races its own goroutines (it writes a
// plain bool they read), which the race detector would report in-process.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/mqstore/mqstore/interop/internal/clientflags"
)

func main() {
	cl := clientflags.Register(flag.CommandLine, "pushconsumer")
	group := flag.String("group", "", "consumer group")
	topic := flag.String("topic", "", "topic")
	tags := flag.String("tags", "", "tag expression (empty: every message)")
	flag.Parse()
	rlog.SetLogLevel("fatal")
	opts := []consumer.Option{consumer.WithNsResolver(cl.Resolver()),
		consumer.WithGroupName(*group), consumer.WithInstance(cl.Instance),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset)}
	if cl.TLS {
		// The client's option sets a process-wide default: every client of
		// the process speaks TLS from here on, hence a process of its own.
		opts = append(opts, consumer.WithTls(true))
	}
	if cred, ok := cl.Credentials(); ok {
		opts = append(opts, consumer.WithCredentials(cred))
	}
	c, err := rocketmq.NewPushConsumer(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sel := consumer.MessageSelector{}
	if *tags != "" {
		sel = consumer.MessageSelector{Type: consumer.TAG, Expression: *tags}
	}
	var mu sync.Mutex
	if err := c.Subscribe(*topic, sel, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			fmt.Printf("MSG %s %d %d %d %s\n", m.MsgId, m.Queue.QueueId, m.QueueOffset, m.ReconsumeTimes, m.Body)
		}
		return consumer.ConsumeSuccess, nil
	}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := c.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("STARTED")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	if err := c.Shutdown(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	mu.Lock()
	fmt.Println("SHUTDOWN")
	mu.Unlock()
}
