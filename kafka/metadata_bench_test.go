package kafka_test

import (
	"testing"

	"github.com/IBM/sarama"
	metrics "github.com/rcrowley/go-metrics"

	"github.com/differential-dev/differential/internal/testbroker"
)

// BenchmarkMetadataRefresh is what the group client's periodic check of the
// input's partition count (Config.MetadataRefresh) costs per interval: one
// Metadata request, for the input topic only ("topic"), against sarama's
// default of every topic of the cluster ("full"). Reports bytes sent and
// received per refresh.
func BenchmarkMetadataRefresh(b *testing.B) {
	br := testbroker.New(b)
	topic := br.Topic(b, 8)
	for _, full := range []bool{false, true} {
		name := "topic"
		if full {
			name = "full"
		}
		b.Run(name, func(b *testing.B) {
			sc := br.Config()
			sc.Metadata.Full = full
			sc.Metadata.RefreshFrequency = 0
			reg := metrics.NewRegistry()
			sc.MetricRegistry = reg
			c, err := sarama.NewClient(br.Addrs(), sc)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			topics := []string{topic}
			if full {
				topics = nil
			}
			if err := c.RefreshMetadata(topics...); err != nil {
				b.Fatal(err)
			}
			in := metrics.GetOrRegisterMeter("incoming-byte-rate", reg)
			out := metrics.GetOrRegisterMeter("outgoing-byte-rate", reg)
			in0, out0 := in.Count(), out.Count()
			b.ResetTimer()
			for b.Loop() {
				if err := c.RefreshMetadata(topics...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(in.Count()-in0)/float64(b.N), "B-in/op")
			b.ReportMetric(float64(out.Count()-out0)/float64(b.N), "B-out/op")
		})
	}
}
