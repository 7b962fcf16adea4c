// Command kafkaready waits until a Kafka cluster answers a metadata request that lists the
// expected number of brokers, for scripts/kafka.sh start.
//
//	kafkaready -brokers 127.0.0.1:9092 [-expect 1] [-pids 1234,1235] [-timeout 90s]
//
// It exits 0 once ready, and 1 when the timeout passes or when one of the given pids (the
// broker JVMs) has exited, so a broker that dies at start fails fast instead of at the timeout.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/internal/kadmin"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "comma-separated bootstrap addresses")
	expect := flag.Int("expect", 1, "number of brokers the metadata must list")
	pids := flag.String("pids", "", "comma-separated pids that must stay alive while waiting")
	timeout := flag.Duration("timeout", 90*time.Second, "how long to wait")
	flag.Parse()

	if err := wait(strings.Split(*brokers, ","), *expect, parsePids(*pids), *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "kafkaready:", err)
		os.Exit(1)
	}
}

func parsePids(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f == "" {
			continue
		}
		pid, err := strconv.Atoi(f)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kafkaready: bad pid %q\n", f)
			os.Exit(2)
		}
		out = append(out, pid)
	}
	return out
}

func wait(addrs []string, expect int, pids []int, timeout time.Duration) error {
	start := time.Now()
	deadline := start.Add(timeout)
	var last error
	for {
		for _, pid := range pids {
			// Signal 0 checks existence only. The pids are our own children's, so
			// EPERM cannot happen; ESRCH means the JVM exited.
			if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("broker process %d exited while starting", pid)
			}
		}
		last = probe(addrs, expect)
		if last == nil {
			fmt.Fprintf(os.Stderr, "kafkaready: %d broker(s) ready after %.1fs\n", expect, time.Since(start).Seconds())
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %w", timeout, last)
		}
		time.Sleep(250 * time.Millisecond) // polling an external process; nothing to block on
	}
}

// probe fetches metadata and checks that the cluster lists expect brokers and a controller.
func probe(addrs []string, expect int) error {
	cfg := kadmin.ProbeConfig()
	cfg.ClientID = "differential-kafkaready"
	cfg.Net.ReadTimeout = 2 * time.Second
	cfg.Net.WriteTimeout = 2 * time.Second
	cfg.Metadata.Full = true // fetch metadata (all topics: few on a fresh cluster) in NewClient
	client, err := sarama.NewClient(addrs, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = client.Close() }()
	if got := len(client.Brokers()); got < expect {
		return fmt.Errorf("metadata lists %d of %d brokers", got, expect)
	}
	if _, err := client.Controller(); err != nil {
		return fmt.Errorf("no controller yet: %w", err)
	}
	return nil
}
