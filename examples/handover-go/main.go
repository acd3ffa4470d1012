// The peer of examples/handover.rs: the same handover rounds with etcd's
// own Go recipe, clientv3/concurrency.Election (etcd 3.4's, from Debian's
// golang-etcd-server-dev), against the same etcd.
//
//	scripts/build-example-go.sh handover-go   # prints the binary's path
//	handover-go -endpoint 127.0.0.1:2379 -rounds 30
//
// Each round: A leads, B campaigns (its key exists), a follower observes;
// then A resigns, or A's session lease is revoked behind its back. Sleeps
// only separate the rounds; every figure is measured between events.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
)

func summary(what string, d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(q float64) float64 {
		return float64(d[int(float64(len(d)-1)*q+0.5)].Microseconds()) / 1e3
	}
	fmt.Printf("%-44s p50 %7.2f ms   p90 %7.2f ms   max %7.2f ms   (n=%d)\n",
		what, at(0.5), at(0.9), at(1.0), len(d))
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "handover-go:", err)
		os.Exit(1)
	}
}

// round runs one handover; returns (next campaign returned, follower saw
// the new leader, resign returned or old session saw its end).
func round(cli *clientv3.Client, prefix string, ttl int, revoke bool) (time.Duration, time.Duration, time.Duration) {
	ctx := context.Background()
	sa, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	must(err)
	sb, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	must(err)
	sf, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	must(err)
	defer sb.Close()
	defer sf.Close()
	ea := concurrency.NewElection(sa, prefix)
	eb := concurrency.NewElection(sb, prefix)
	ef := concurrency.NewElection(sf, prefix)
	must(ea.Campaign(ctx, "a"))
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	changes := ef.Observe(octx)
	<-changes // a
	elected := make(chan time.Time, 1)
	go func() {
		must(eb.Campaign(ctx, "b"))
		elected <- time.Now()
	}()
	for {
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		must(err)
		if resp.Count >= 2 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if revoke {
		// As long as examples/handover.rs waits in its revoke rounds.
		time.Sleep(time.Duration(ttl)*time.Second/10 + 200*time.Millisecond)
	}
	seen := make(chan time.Time, 1)
	go func() {
		for r := range changes {
			if len(r.Kvs) > 0 && string(r.Kvs[0].Value) == "b" {
				seen <- time.Now()
				return
			}
		}
	}()
	t0 := time.Now()
	var old time.Duration
	if revoke {
		_, err := cli.Revoke(ctx, sa.Lease())
		must(err)
		<-sa.Done()
		old = time.Since(t0)
	} else {
		must(ea.Resign(ctx))
		old = time.Since(t0)
		sa.Close()
	}
	t1 := <-elected
	t2 := <-seen
	must(eb.Resign(ctx))
	return t1.Sub(t0), t2.Sub(t0), old
}

func main() {
	endpoint := flag.String("endpoint", "127.0.0.1:2379", "etcd endpoint")
	rounds := flag.Int("rounds", 30, "rounds per kind")
	ttl := flag.Int("ttl", 10, "session TTL in seconds")
	flag.Parse()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{*endpoint}, DialTimeout: 5 * time.Second})
	must(err)
	defer cli.Close()
	prefix := fmt.Sprintf("/handover-go-%d/", os.Getpid())
	for _, revoke := range []bool{false, true} {
		var elected, seen, old []time.Duration
		for i := 0; i < *rounds; i++ {
			e, s, o := round(cli, prefix, *ttl, revoke)
			elected, seen, old = append(elected, e), append(seen, s), append(old, o)
			time.Sleep(20 * time.Millisecond)
		}
		how, what := "resign", "Resign() returns"
		if revoke {
			how, what = "lease revoked", "old session sees its end"
		}
		summary("go: "+how+": next Campaign returns", elected)
		summary("go: "+how+": follower sees the new leader", seen)
		summary("go: "+how+": "+what, old)
	}
}
