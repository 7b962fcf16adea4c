package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/IBM/sarama"
)

// A member of the group advertises its HTTP address (as Kafka Streams'
// application.server does) inside the user data of its subscription,
// where sarama's sticky strategies keep their own data: the sticky
// strategy's user data is the member's previous assignment, a map of topic
// to partitions plus a generation (StickyAssignorUserDataV1). The address
// rides in that map as one more "topic" with no partitions, named by
// advertiseTopicPrefix and the address: a name no Kafka topic can have
// ('/' and ':' are not allowed in topic names), and an entry a sticky
// leader, with or without this wrapper, reads as owning nothing. The
// cooperative sticky strategy reads ownership from the subscription's
// owned partitions and its generation field (KIP-792) and ignores the user
// data; with an older subscription version it ignores user data it cannot
// decode. So members with and without an advertised address share a group,
// and a member without one is simply not found by GroupAddresses.
const advertiseTopicPrefix = "differential/http="

// Advertise returns strategy with addr (host:port) advertised in every
// subscription of the member; an empty addr returns strategy as it is. On
// a strategy from PreferWarm (or Advertise) it returns a copy advertising
// addr too, since one wrapper must write the whole user data.
func Advertise(strategy sarama.BalanceStrategy, addr string) sarama.BalanceStrategy {
	if addr == "" || strategy == nil {
		return strategy
	}
	if a, ok := strategy.(*advertising); ok {
		a = a.clone()
		a.addr = addr
		return a
	}
	return &advertising{BalanceStrategy: strategy, addr: addr}
}

// advertising adds entries to the sticky user data of the member's
// subscriptions: its address (when addr is set) and the partitions of
// warmTopic it holds warm (when warm is set, see PreferWarm).
type advertising struct {
	sarama.BalanceStrategy
	addr      string
	warmTopic string
	warm      func() []int32
	mu        sync.Mutex
	last      []byte // the user data of the member's last assignment
}

// clone is a copy of a sharing its wrapped strategy (and not its mutex).
func (a *advertising) clone() *advertising {
	a.mu.Lock()
	defer a.mu.Unlock()
	return &advertising{BalanceStrategy: a.BalanceStrategy, addr: a.addr, warmTopic: a.warmTopic, warm: a.warm, last: a.last}
}

var (
	_ sarama.SubscriptionUserDataBalanceStrategy = (*advertising)(nil)
	_ sarama.OnAssignmentBalanceStrategy         = (*advertising)(nil)
	_ sarama.RebalanceProtocolBalanceStrategy    = (*advertising)(nil)
)

// SupportedProtocols are the wrapped strategy's (eager when it says none).
func (a *advertising) SupportedProtocols() []sarama.RebalanceProtocol {
	if p, ok := a.BalanceStrategy.(sarama.RebalanceProtocolBalanceStrategy); ok {
		return p.SupportedProtocols()
	}
	return []sarama.RebalanceProtocol{sarama.RebalanceProtocolEager}
}

// OnAssignment keeps the assignment's user data (the sticky strategy's
// record of it), which the next subscription carries as sarama would.
func (a *advertising) OnAssignment(m *sarama.ConsumerGroupMemberAssignment, generation int32) {
	a.mu.Lock()
	a.last = append([]byte(nil), m.UserData...)
	a.mu.Unlock()
	if o, ok := a.BalanceStrategy.(sarama.OnAssignmentBalanceStrategy); ok {
		o.OnAssignment(m, generation)
	}
}

// SubscriptionUserData is the last assignment's user data with the address
// and the warm partitions added (a fresh member's: no partitions,
// generation -1, the sticky strategy's "no generation").
func (a *advertising) SubscriptionUserData(topics []string) ([]byte, error) {
	a.mu.Lock()
	last := a.last
	a.mu.Unlock()
	d := stickyData{Topics: map[string][]int32{}, Generation: -1}
	if len(last) > 0 {
		var err error
		if d, err = decodeStickyData(last); err != nil {
			// Not the sticky strategy's data: keep it as sarama would have.
			return last, nil
		}
	}
	for t := range d.Topics {
		if strings.HasPrefix(t, advertiseTopicPrefix) || strings.HasPrefix(t, warmTopicPrefix) {
			delete(d.Topics, t)
		}
	}
	if a.addr != "" {
		d.Topics[advertiseTopicPrefix+a.addr] = nil
	}
	if a.warm != nil {
		if e := warmEntry(a.warmTopic, a.warm()); e != "" {
			d.Topics[e] = nil
		}
	}
	return d.encode(), nil
}

// stickyData is sarama's StickyAssignorUserDataV1 (its codec is not
// exported): int32 count of topics, each a string (int16 length) and an
// int32 array, then the int32 generation.
type stickyData struct {
	Topics     map[string][]int32
	Generation int32
}

func (d stickyData) encode() []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(d.Topics)))
	for t, ps := range d.Topics {
		b = binary.BigEndian.AppendUint16(b, uint16(len(t)))
		b = append(b, t...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(ps)))
		for _, p := range ps {
			b = binary.BigEndian.AppendUint32(b, uint32(p))
		}
	}
	return binary.BigEndian.AppendUint32(b, uint32(d.Generation))
}

var errStickyData = errors.New("not sticky assignor user data")

func decodeStickyData(b []byte) (stickyData, error) {
	d := stickyData{Topics: map[string][]int32{}}
	u32 := func() (uint32, bool) {
		if len(b) < 4 {
			return 0, false
		}
		v := binary.BigEndian.Uint32(b)
		b = b[4:]
		return v, true
	}
	n, ok := u32()
	if !ok || n > uint32(len(b)) {
		return d, errStickyData
	}
	for range n {
		if len(b) < 2 {
			return d, errStickyData
		}
		l := int(binary.BigEndian.Uint16(b))
		b = b[2:]
		if len(b) < l {
			return d, errStickyData
		}
		t := string(b[:l])
		b = b[l:]
		np, ok := u32()
		if !ok || np > uint32(len(b))/4 {
			return d, errStickyData
		}
		ps := make([]int32, 0, np)
		for range np {
			p, _ := u32()
			ps = append(ps, int32(p))
		}
		d.Topics[t] = ps
	}
	g, ok := u32()
	if !ok || len(b) != 0 {
		return d, errStickyData
	}
	d.Generation = int32(g)
	return d, nil
}

// advertisedAddr is the address in a member's subscription user data, or "".
func advertisedAddr(userData []byte) string {
	d, err := decodeStickyData(userData)
	if err != nil {
		return ""
	}
	for t := range d.Topics {
		if a, ok := strings.CutPrefix(t, advertiseTopicPrefix); ok {
			return a
		}
	}
	return ""
}

// GroupOwners describes group (DescribeGroups) and returns, for each
// partition of topic assigned in the group's current generation, the
// advertised address of its member ("" when the member advertises none).
// A group that is rebalancing has no assignment: the map is empty.
func GroupOwners(ctx context.Context, admin sarama.ClusterAdmin, group, topic string) (map[int32]string, error) {
	type result struct {
		m   map[int32]string
		err error
	}
	ch := make(chan result, 1)
	go func() {
		descs, err := admin.DescribeConsumerGroups([]string{group})
		if err != nil {
			ch <- result{err: err}
			return
		}
		owners := map[int32]string{}
		for _, d := range descs {
			if d.Err != sarama.ErrNoError {
				ch <- result{err: fmt.Errorf("describe group %s: %w", group, d.Err)}
				return
			}
			if d.State != "Stable" {
				continue
			}
			for _, m := range groupMembers(d) {
				for _, p := range m.Owned[topic] {
					owners[p] = m.Addr
				}
			}
		}
		ch <- result{m: owners}
	}()
	select {
	case r := <-ch:
		return r.m, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
