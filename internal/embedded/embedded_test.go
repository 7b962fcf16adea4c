package embedded_test

import (
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/internal/embedded"
)

func TestStartServesConfiguredTopics(t *testing.T) {
	c, err := embedded.Start(embedded.Brokers(3), embedded.Topic("events", 4), embedded.Partitions(2))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := len(c.Addrs()); got != 3 {
		t.Fatalf("Addrs() has %d brokers, want 3", got)
	}

	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_0_0_0
	admin, err := sarama.NewClusterAdmin(c.Addrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Close() }()
	// CreateTopics with -1 partitions takes the Partitions default.
	if err := admin.CreateTopic("defaulted", &sarama.TopicDetail{NumPartitions: -1, ReplicationFactor: -1}, false); err != nil {
		t.Fatal(err)
	}
	metas, err := admin.DescribeTopics([]string{"events", "defaulted", "missing"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"events": 4, "defaulted": 2}
	for _, m := range metas {
		if m.Name == "missing" {
			if !errors.Is(m.Err, sarama.ErrUnknownTopicOrPartition) {
				t.Errorf("topic missing: err %v, want unknown topic (no auto-creation)", m.Err)
			}
			continue
		}
		if m.Err != sarama.ErrNoError || len(m.Partitions) != want[m.Name] {
			t.Errorf("topic %s: err %v, %d partitions, want %d", m.Name, m.Err, len(m.Partitions), want[m.Name])
		}
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	c, err := embedded.Start()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	c.Close()
}

func TestStartRejectsBadOptions(t *testing.T) {
	if _, err := embedded.Start(embedded.Brokers(0)); err == nil {
		t.Error("Brokers(0) accepted")
	}
	if _, err := embedded.Start(embedded.Brokers(2), embedded.Ports(0)); err == nil {
		t.Error("one port for two brokers accepted")
	}
}

// TestOldRecordsSurviveRetention: records dated weeks back (as the
// generated workloads are) are not deleted when kfake applies retention.
func TestOldRecordsSurviveRetention(t *testing.T) {
	c, err := embedded.Start(embedded.Topic("old", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_0_0_0
	cfg.Producer.Return.Successes = true
	p, err := sarama.NewSyncProducer(c.Addrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: "old", Value: sarama.StringEncoder("v"),
		Timestamp: time.Now().Add(-30 * 24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	c.Fake().ApplyRetention()
	client, err := sarama.NewClient(c.Addrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Close() }()
	start, err := client.GetOffset("old", 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	if start != 0 {
		t.Fatalf("log start offset %d after retention, want 0 (the 30-day-old record kept)", start)
	}
}
