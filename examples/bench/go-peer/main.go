// Benchmark peer: etcd's own Go client concurrency.Mutex, the reference
// fair lock on etcd. Builds offline against Debian's golang-etcd-server-dev.
//
//   go-mutex -endpoints 127.0.0.1:2379 -mode uncontended -n 2000
//   go-mutex -endpoints 127.0.0.1:2379 -mode contended -clients 16 -n 2000
//   go-mutex -endpoints 127.0.0.1:2379 -mode soak -clients 16 -contended 4 -duration 60s -window 10s
//
// Prints one line: mode, clients, ops, ops/s, p50/p99 latency (microseconds);
// soak adds the cycles/s of the first and the last window.
// Built by scripts/build-go-peer.sh, offline, from Debian's packages.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
)

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "comma-separated etcd endpoints")
	mode := flag.String("mode", "uncontended", "uncontended | contended | keys")
	clients := flag.Int("clients", 1, "concurrent clients (each with its own session)")
	n := flag.Int("n", 1000, "total lock/unlock cycles")
	prefix := flag.String("prefix", fmt.Sprintf("/peer-go/%d", time.Now().UnixNano()), "key prefix")
	contended := flag.Int("contended", 4, "soak: clients on the one contended key")
	duration := flag.Duration("duration", 60*time.Second, "soak: how long")
	window := flag.Duration("window", 10*time.Second, "soak: window for cycles/s")
	flag.Parse()

	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*endpoints, ","), DialTimeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer cli.Close()

	if *mode == "soak" {
		soak(cli, *prefix, *clients, *contended, *duration, *window)
		return
	}
	per := *n / *clients
	lat := make([][]time.Duration, *clients)
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < *clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
			if err != nil {
				panic(err)
			}
			defer s.Close()
			key := *prefix + "/shared"
			if *mode == "keys" {
				key = fmt.Sprintf("%s/k%d", *prefix, c)
			}
			m := concurrency.NewMutex(s, key)
			for i := 0; i < per; i++ {
				t := time.Now()
				if err := m.Lock(context.Background()); err != nil {
					panic(err)
				}
				if err := m.Unlock(context.Background()); err != nil {
					panic(err)
				}
				lat[c] = append(lat[c], time.Since(t))
			}
		}(c)
	}
	wg.Wait()
	el := time.Since(start)
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	p := func(q float64) int64 { return all[int(q*float64(len(all)-1))].Microseconds() }
	fmt.Printf("go-concurrency-mutex mode=%s clients=%d ops=%d ops_per_s=%.0f p50_us=%d p99_us=%d\n",
		*mode, *clients, len(all), float64(len(all))/el.Seconds(), p(0.5), p(0.99))
}

// soak runs `keys` clients on their own keys and `contended` clients on one
// shared key for `d`, counting cycles per window.
func soak(cli *clientv3.Client, prefix string, keys, contended int, d, window time.Duration) {
	var mu sync.Mutex
	counts := make([]int, int(d/window)+1)
	start := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < keys+contended; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
			if err != nil {
				panic(err)
			}
			defer s.Close()
			key := fmt.Sprintf("%s/k%d", prefix, c)
			if c >= keys {
				key = prefix + "/shared"
			}
			m := concurrency.NewMutex(s, key)
			for time.Since(start) < d {
				if err := m.Lock(context.Background()); err != nil {
					panic(err)
				}
				if err := m.Unlock(context.Background()); err != nil {
					panic(err)
				}
				w := int(time.Since(start) / window)
				mu.Lock()
				if w < len(counts) {
					counts[w]++
				}
				mu.Unlock()
			}
		}(c)
	}
	wg.Wait()
	full := int(d / window)
	total := 0
	for _, n := range counts[:full] {
		total += n
	}
	per := window.Seconds()
	fmt.Printf("go-concurrency-mutex mode=soak clients=%d ops=%d ops_per_s=%.0f first_per_s=%.0f last_per_s=%.0f p50_us=0 p99_us=0\n",
		keys+contended, total, float64(total)/(float64(full)*per), float64(counts[0])/per, float64(counts[full-1])/per)
}
