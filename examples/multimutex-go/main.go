// The peer of the bench's several-keys rows (examples/bench/multi_rows.rs):
// etcd's own Go concurrency.Mutex (etcd 3.4's clientv3/concurrency, from
// Debian's golang-etcd-server-dev), taken one key after the other in sorted
// order, against the same etcd, with the same workload.
//
//	scripts/build-example-go.sh multimutex-go   # prints the binary's path
//	multimutex-go -endpoints 127.0.0.1:2379 -clients 16 -keys 8 -warmup 1s -duration 5s
//
// Each client is a goroutine with its own concurrency.Session on one shared
// connection and one Mutex per key. Each step draws 2 distinct keys of
// -keys from a xorshift64 seeded with the client's number (the same draw as
// multi_rows.rs), locks the lower then the higher, holding the first while
// waiting for the second, and unlocks both. Grants are counted from the end
// of the warm-up to the end of the window; the etcd revision is read with a
// plain Get at both ends.
//
// Prints one line of key=value fields: grants (in the window), secs, rev0,
// rev1, p50_us, p99_us (time to holding both keys) and violations (a key
// held by two clients at once, as seen by this process: must be 0).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
)

// Phases of a run: only grants made while measuring count.
const (
	warming int32 = iota
	measuring
	stopped
)

// pairs is client c's draw: xorshift64 seeded with c, as in multi_rows.rs.
type pairs struct{ x, keys uint64 }

func newPairs(c, keys int) *pairs {
	return &pairs{x: 0x9E3779B97F4A7C15 * uint64(c+1), keys: uint64(keys)}
}

func (p *pairs) next() uint64 {
	p.x ^= p.x << 13
	p.x ^= p.x >> 7
	p.x ^= p.x << 17
	return p.x
}

// pair returns two distinct keys, in the order drawn.
func (p *pairs) pair() (int, int) {
	a := p.next() % p.keys
	b := p.next() % (p.keys - 1)
	if b >= a {
		b++
	}
	return int(a), int(b)
}

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "comma-separated etcd endpoints")
	clients := flag.Int("clients", 16, "concurrent clients (each with its own session)")
	keys := flag.Int("keys", 8, "keys to draw 2 of per step")
	warmup := flag.Duration("warmup", time.Second, "untimed warm-up")
	duration := flag.Duration("duration", 5*time.Second, "measured window")
	prefix := flag.String("prefix", fmt.Sprintf("/peer-go-multi/%d", time.Now().UnixNano()), "key prefix")
	flag.Parse()
	if *keys < 2 {
		fmt.Fprintln(os.Stderr, "-keys must be 2 or more")
		os.Exit(2)
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*endpoints, ","), DialTimeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer cli.Close()
	revision := func() int64 {
		resp, err := cli.Get(context.Background(), *prefix+"/rev")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return resp.Header.Revision
	}

	var phase int32
	var grants, violations int64
	holders := make([]int64, *keys)
	lat := make([][]time.Duration, *clients)
	var ready, wg sync.WaitGroup
	start := make(chan struct{})
	ctx := context.Background()
	for c := 0; c < *clients; c++ {
		ready.Add(1)
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
			if err != nil {
				panic(err)
			}
			defer s.Close()
			ms := make([]*concurrency.Mutex, *keys)
			for k := range ms {
				ms[k] = concurrency.NewMutex(s, fmt.Sprintf("%s/k%d", *prefix, k))
			}
			draw := newPairs(c, *keys)
			ready.Done()
			<-start
			for atomic.LoadInt32(&phase) != stopped {
				a, b := draw.pair()
				if a > b {
					a, b = b, a
				}
				t := time.Now()
				if err := ms[a].Lock(ctx); err != nil {
					panic(err)
				}
				if err := ms[b].Lock(ctx); err != nil {
					panic(err)
				}
				took := time.Since(t)
				for _, k := range []int{a, b} {
					if atomic.AddInt64(&holders[k], 1) != 1 {
						atomic.AddInt64(&violations, 1)
					}
				}
				if atomic.LoadInt32(&phase) == measuring {
					atomic.AddInt64(&grants, 1)
					lat[c] = append(lat[c], took)
				}
				atomic.AddInt64(&holders[a], -1)
				atomic.AddInt64(&holders[b], -1)
				if err := ms[b].Unlock(ctx); err != nil {
					panic(err)
				}
				if err := ms[a].Unlock(ctx); err != nil {
					panic(err)
				}
			}
		}(c)
	}
	ready.Wait()
	close(start)
	time.Sleep(*warmup)
	rev0 := revision()
	t0 := time.Now()
	atomic.StoreInt32(&phase, measuring)
	time.Sleep(*duration)
	atomic.StoreInt32(&phase, stopped)
	secs := time.Since(t0).Seconds()
	rev1 := revision()
	wg.Wait()

	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	p := func(q float64) int64 {
		if len(all) == 0 {
			return 0
		}
		return all[int(q*float64(len(all)-1))].Microseconds()
	}
	fmt.Printf("go-multimutex clients=%d keys=%d grants=%d secs=%.3f rev0=%d rev1=%d p50_us=%d p99_us=%d violations=%d\n",
		*clients, *keys, grants, secs, rev0, rev1, p(0.5), p(0.99), violations)
}
