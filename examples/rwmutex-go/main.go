// The peer of the bench's read/write rows (examples/bench/shared_rows.rs):
// etcd's own Go recipe.RWMutex (etcd 3.4's contrib/recipes, from Debian's
// golang-etcd-server-dev), against the same etcd, with the same workload.
//
//	scripts/build-example-go.sh rwmutex-go   # prints the binary's path
//	rwmutex-go -endpoints 127.0.0.1:2379 -clients 16 -warmup 1s -duration 5s
//
// Each client is a goroutine with its own concurrency.Session on one shared
// connection, looping on one key: its i-th operation is a write lock when
// (i + client) % 10 == 0, else a read lock (90 % reads), released at once.
// Grants are counted from the end of the warm-up to the end of the window;
// the etcd revision is read with a plain Get at both ends.
//
// Prints one line of key=value fields: reads, writes (grants in the window),
// secs, rev0, rev1, p50_us, p99_us (time to a grant), max_readers (held at
// once, as seen by this process) and violations (a writer beside another
// holder, or a reader beside a writer: must be 0).
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
	recipe "go.etcd.io/etcd/contrib/recipes"
)

// Phases of a run: only grants made while measuring count.
const (
	warming int32 = iota
	measuring
	stopped
)

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "comma-separated etcd endpoints")
	clients := flag.Int("clients", 16, "concurrent clients (each with its own session)")
	warmup := flag.Duration("warmup", time.Second, "untimed warm-up")
	duration := flag.Duration("duration", 5*time.Second, "measured window")
	prefix := flag.String("prefix", fmt.Sprintf("/peer-go-rw/%d", time.Now().UnixNano()), "key prefix")
	flag.Parse()

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
	var readers, writers, maxReaders, violations int64
	var reads, writes int64
	lat := make([][]time.Duration, *clients)
	var ready, wg sync.WaitGroup
	start := make(chan struct{})
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
			m := recipe.NewRWMutex(s, *prefix+"/shared")
			ready.Done()
			<-start
			for i := 0; atomic.LoadInt32(&phase) != stopped; i++ {
				write := (i+c)%10 == 0
				t := time.Now()
				if write {
					if err := m.Lock(); err != nil {
						panic(err)
					}
					if atomic.AddInt64(&writers, 1) != 1 || atomic.LoadInt64(&readers) != 0 {
						atomic.AddInt64(&violations, 1)
					}
				} else {
					if err := m.RLock(); err != nil {
						panic(err)
					}
					n := atomic.AddInt64(&readers, 1)
					if atomic.LoadInt64(&writers) != 0 {
						atomic.AddInt64(&violations, 1)
					}
					for {
						max := atomic.LoadInt64(&maxReaders)
						if n <= max || atomic.CompareAndSwapInt64(&maxReaders, max, n) {
							break
						}
					}
				}
				took := time.Since(t)
				if atomic.LoadInt32(&phase) == measuring {
					if write {
						atomic.AddInt64(&writes, 1)
					} else {
						atomic.AddInt64(&reads, 1)
					}
					lat[c] = append(lat[c], took)
				}
				if write {
					atomic.AddInt64(&writers, -1)
					err = m.Unlock()
				} else {
					atomic.AddInt64(&readers, -1)
					err = m.RUnlock()
				}
				if err != nil {
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
	fmt.Printf("go-recipe-rwmutex clients=%d reads=%d writes=%d secs=%.3f rev0=%d rev1=%d p50_us=%d p99_us=%d max_readers=%d violations=%d\n",
		*clients, reads, writes, secs, rev0, rev1, p(0.5), p(0.99), maxReaders, violations)
}
