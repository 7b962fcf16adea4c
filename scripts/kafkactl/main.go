// Command kafkactl answers questions about a running Kafka cluster for scripts/kafka.sh's
// per-node commands, in well under a second (a Kafka CLI class needs a JVM start, 2-4 s on a
// small machine):
//
//	kafkactl -brokers A,B,C leader TOPIC PARTITION   print the node id leading the partition
//	kafkactl -brokers A,B,C coordinator GROUP        print the node id coordinating the group
//	kafkactl -brokers A -node N [-pid P] serving     wait until the node at A lists itself as N
//	kafkactl -brokers A,B,C insync                   wait until every partition's ISR is complete
//
// The waiting modes poll until -timeout (default 90s) and fail at once if -pid names a process
// that has exited. Exit status: 0 done, 1 failed or timed out, 2 bad usage.
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

	"github.com/differential-dev/differential/internal/kadmin"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "comma-separated bootstrap addresses")
	node := flag.Int("node", 0, "serving: the node id the broker at -brokers must have")
	pid := flag.Int("pid", 0, "serving, insync: fail at once if this process exits")
	timeout := flag.Duration("timeout", 90*time.Second, "serving, insync: how long to wait")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: kafkactl -brokers A,B,C leader TOPIC PARTITION | coordinator GROUP | -node N serving | insync")
		flag.PrintDefaults()
	}
	flag.Parse()
	addrs := strings.Split(*brokers, ",")
	args := flag.Args()
	if len(args) == 0 {
		usage()
	}
	var err error
	switch {
	case args[0] == "leader" && len(args) == 3:
		p, perr := strconv.ParseInt(args[2], 10, 32)
		if perr != nil || p < 0 {
			usage()
		}
		var id int32
		if id, err = kadmin.Leader(addrs, kadmin.ProbeConfig(), args[1], int32(p)); err == nil {
			fmt.Println(id)
		}
	case args[0] == "coordinator" && len(args) == 2:
		var id int32
		if id, err = kadmin.Coordinator(addrs, kadmin.ProbeConfig(), args[1]); err == nil {
			fmt.Println(id)
		}
	case args[0] == "serving" && len(args) == 1 && *node > 0 && len(addrs) == 1:
		err = poll(*timeout, *pid, func() error { return kadmin.Serving(addrs[0], int32(*node), kadmin.ProbeConfig()) })
	case args[0] == "insync" && len(args) == 1:
		err = poll(*timeout, *pid, func() error {
			under, err := kadmin.UnderReplicated(addrs, kadmin.ProbeConfig())
			if err == nil && len(under) > 0 {
				err = fmt.Errorf("%d partition(s) under-replicated, e.g. %s", len(under), under[0])
			}
			return err
		})
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafkactl:", err)
		os.Exit(1)
	}
}

func usage() {
	flag.Usage()
	os.Exit(2)
}

// poll calls probe until it returns nil, the timeout passes, or pid (if not 0) has exited.
func poll(timeout time.Duration, pid int, probe func() error) error {
	start := time.Now()
	for {
		if pid > 0 {
			// Signal 0 checks existence only; ESRCH means the process exited.
			if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("process %d exited", pid)
			}
		}
		err := probe()
		if err == nil {
			fmt.Fprintf(os.Stderr, "kafkactl: done after %.1fs\n", time.Since(start).Seconds())
			return nil
		}
		if time.Since(start) > timeout {
			return fmt.Errorf("not done after %s: %w", timeout, err)
		}
		time.Sleep(250 * time.Millisecond) // polling an external process; nothing to block on
	}
}
