// A peer for the mixed-fleet tests of etcd's layout (tests/etcd_layout.rs):
// etcd's own Go recipes, clientv3/concurrency's Mutex and Election (etcd
// 3.4's, from Debian's golang-etcd-server-dev), driven by lines on stdin,
// telling each event on stdout, one line each.
//
//	scripts/build-example-go.sh recipe-go   # prints the binary's path
//	recipe-go -endpoint 127.0.0.1:2379 -ttl 10 mutex NAME
//	recipe-go -endpoint 127.0.0.1:2379 elect NAME VALUE
//	recipe-go -endpoint 127.0.0.1:2379 observe NAME
//
// Every mode first prints "SESSION <lease hex>": its key is NAME/<lease hex>.
//   - mutex: "HOLDING <key> <create revision>" once Lock returns; stdin
//     "release" unlocks ("RELEASED").
//   - elect: "LEADER <key> <create revision> <value>" once Campaign
//     returns; stdin "proclaim V" ("PROCLAIMED V"), "resign" ("RESIGNED").
//   - observe: "SEEN <key> <create revision> <value>" per leader or
//     proclaim that Observe sends (it never sends an empty seat).
//
// In every mode stdin "revoke" revokes the session lease ("REVOKED"), and
// the end of stdin closes the session and exits. An error prints
// "ERROR <message>" and exits 1.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
)

func must(err error) {
	if err != nil {
		fmt.Printf("ERROR %v\n", err)
		os.Exit(1)
	}
}

// createRevision reads key's create revision.
func createRevision(cli *clientv3.Client, key string) int64 {
	resp, err := cli.Get(context.Background(), key)
	must(err)
	if len(resp.Kvs) == 0 {
		must(fmt.Errorf("own key %s is gone", key))
	}
	return resp.Kvs[0].CreateRevision
}

func main() {
	endpoint := flag.String("endpoint", "127.0.0.1:2379", "etcd endpoint")
	ttl := flag.Int("ttl", 10, "session lease TTL in seconds")
	flag.Parse()
	args := flag.Args()
	if len(args) < 2 || (args[0] == "elect" && len(args) != 3) {
		must(fmt.Errorf("usage: recipe-go [-endpoint E] [-ttl S] mutex NAME | elect NAME VALUE | observe NAME"))
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{*endpoint}})
	must(err)
	defer cli.Close()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(*ttl))
	must(err)
	fmt.Printf("SESSION %x\n", s.Lease())
	ctx := context.Background()
	lines := make(chan string)
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			lines <- strings.TrimSpace(in.Text())
		}
		close(lines)
	}()
	switch args[0] {
	case "mutex":
		m := concurrency.NewMutex(s, args[1])
		must(m.Lock(ctx))
		fmt.Printf("HOLDING %s %d\n", m.Key(), createRevision(cli, m.Key()))
		serve(s, lines, map[string]func(string){
			"release": func(string) { must(m.Unlock(ctx)); fmt.Println("RELEASED") },
		})
	case "elect":
		e := concurrency.NewElection(s, args[1])
		must(e.Campaign(ctx, args[2]))
		key := e.Key()
		fmt.Printf("LEADER %s %d %s\n", key, e.Rev(), args[2])
		serve(s, lines, map[string]func(string){
			"proclaim": func(v string) { must(e.Proclaim(ctx, v)); fmt.Printf("PROCLAIMED %s\n", v) },
			"resign":   func(string) { must(e.Resign(ctx)); fmt.Println("RESIGNED") },
		})
	case "observe":
		e := concurrency.NewElection(s, args[1])
		go func() {
			for resp := range e.Observe(ctx) {
				kv := resp.Kvs[0]
				fmt.Printf("SEEN %s %d %s\n", kv.Key, kv.CreateRevision, kv.Value)
			}
		}()
		serve(s, lines, nil)
	default:
		must(fmt.Errorf("unknown mode %q", args[0]))
	}
}

// serve runs the commands of stdin until it ends: each line is a word
// (one of `commands`, or "revoke") and an optional argument.
func serve(s *concurrency.Session, lines <-chan string, commands map[string]func(string)) {
	for line := range lines {
		word, arg := line, ""
		if i := strings.IndexByte(line, ' '); i >= 0 {
			word, arg = line[:i], line[i+1:]
		}
		if word == "revoke" {
			_, err := s.Client().Revoke(context.Background(), s.Lease())
			must(err)
			fmt.Println("REVOKED")
			continue
		}
		run, ok := commands[word]
		if !ok {
			must(fmt.Errorf("unknown command %q", line))
		}
		run(arg)
	}
	s.Close()
}
