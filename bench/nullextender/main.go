// Command nullextender is the fastest scheduler extender there can be, for `make bench-k8s --modes null`:
// it speaks kube-scheduler's extender wire format (nodeCacheCapable: node names only) and does no work.
// filter passes the nodes it is given (as many as kube-scheduler would score, as the extender samples by
// default: --percentage-of-nodes-to-score), prioritize scores every node 0, bind creates the pod's Binding
// at once (no claim is allocated). Run behind the same kube-scheduler configuration as the extender, its
// throughput is the ceiling of the extender path on that kube-scheduler: what kube-scheduler itself and
// the HTTP round trips cost, with nothing of ours in them. With --write-claims (`--modes null-writes`)
// filter passes only nodes with a free device and bind allocates the pod's claim through the API first
// (claims.go). With --device-scoring=filter, as the extender's device scoring in filter with its
// kube-scheduler's prioritizeVerb left out, filter passes on only the first of those nodes: one feasible
// node, which kube-scheduler binds to without scoring (the extender passes on its strictly best node alone
// for most pods, ties for the rest).
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// The parts of kube-scheduler's extender messages (k8s.io/kube-scheduler/extender/v1) this server reads
// or writes; encoding/json skips the rest (the pod) without building it.
type filterArgs struct {
	Pod struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
	} `json:"pod"`
	NodeNames *[]string `json:"nodenames"`
}

type filterResult struct {
	NodeNames                  *[]string         `json:"nodenames"`
	FailedNodes                map[string]string `json:"failedNodes"`
	FailedAndUnresolvableNodes map[string]string `json:"failedAndUnresolvableNodes"`
	Error                      string            `json:"error"`
}

type hostPriority struct {
	Host  string `json:"host"`
	Score int64  `json:"score"`
}

type bindArgs struct {
	PodName      string `json:"podName"`
	PodNamespace string `json:"podNamespace"`
	PodUID       string `json:"podUID"`
	Node         string `json:"node"`
}

type bindResult struct {
	Error string `json:"error"`
}

// bucket is a token bucket: the API client's rate limit, as kube-scheduler's clientConnection qps/burst.
type bucket struct {
	mu     sync.Mutex
	qps    float64
	burst  float64
	tokens float64
	last   time.Time
}

func (b *bucket) wait() {
	b.mu.Lock()
	now := time.Now()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.qps)
	b.last = now
	b.tokens--
	delay := time.Duration(0)
	if b.tokens < 0 {
		delay = time.Duration(-b.tokens / b.qps * float64(time.Second))
	}
	b.mu.Unlock()
	time.Sleep(delay)
}

type server struct {
	percentage int
	oneNode    bool // --device-scoring=filter
	api        string
	token      string
	client     *http.Client
	watcher    *http.Client // no timeout: watches stay open
	limit      *bucket
	inventory  *inventory // with --write-claims, else nil
}

// unanswered is a request that got no answer: it may have been carried out.
type unanswered struct{ error }

// retries429 is how many times a request kube-apiserver turned away with 429 and a Retry-After (priority
// and fairness) is sent again after that wait, as client-go does for kube-scheduler and the extender's
// client for the extender (neither retries a 5xx here: it may come after a write was stored).
const retries429 = 10

// send makes one API request (rate limited when limited) and returns the answer's body, or an error
// when its status is not want.
func (s *server) send(method, path string, body []byte, limited bool, want int) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		request, _ := http.NewRequest(method, s.api+path, bytes.NewReader(body))
		request.Header.Set("Authorization", "Bearer "+s.token)
		request.Header.Set("Content-Type", "application/json")
		if limited {
			s.limit.wait()
		}
		response, err := s.client.Do(request)
		if err != nil {
			return nil, unanswered{err}
		}
		answer, err := io.ReadAll(response.Body)
		response.Body.Close()
		if err != nil {
			return nil, unanswered{err}
		}
		wait, err := strconv.Atoi(response.Header.Get("Retry-After"))
		if response.StatusCode == http.StatusTooManyRequests && err == nil && attempt < retries429 {
			time.Sleep(time.Duration(max(wait, 0)) * time.Second)
			continue
		}
		if response.StatusCode != want {
			return nil, fmt.Errorf("%s %s: %s: %s", method, path, response.Status, answer)
		}
		return answer, nil
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		log.Printf("encode: %v", err)
	}
}

func (s *server) filter(w http.ResponseWriter, r *http.Request) {
	var args filterArgs
	if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
		writeJSON(w, filterResult{Error: err.Error()})
		return
	}
	failed := map[string]string{}
	if args.NodeNames != nil {
		names := *args.NodeNames
		limit := nodesToScore(s.percentage, len(names))
		if s.oneNode {
			limit = min(limit, 1)
		}
		if s.inventory != nil {
			// A pod whose claim an earlier attempt allocated can only go where the claim is.
			allocatedOn := s.inventory.allocatedOn(args.Pod.Metadata.UID)
			fit := make([]string, 0, limit)
			for _, name := range names {
				if len(fit) == limit {
					break
				}
				if allocatedOn != "" && name != allocatedOn {
					failed[name] = "the pod's claim is allocated on " + allocatedOn
				} else if allocatedOn != "" || s.inventory.free(name) {
					fit = append(fit, name)
				} else {
					failed[name] = "no free device"
				}
			}
			names = fit
		}
		names = names[:min(limit, len(names))]
		args.NodeNames = &names
	}
	writeJSON(w, filterResult{NodeNames: args.NodeNames, FailedNodes: failed})
}

// nodesToScore is how many of n nodes kube-scheduler scores with percentageOfNodesToScore p (0: its
// adaptive default, 50 % minus a point per 125 nodes, at least 5 %; never fewer than 100 nodes), the
// number the extender passes on (app/scheduling/sampling.py).
func nodesToScore(p, n int) int {
	if n < 100 || p >= 100 {
		return n
	}
	if p == 0 {
		p = max(50-n/125, 5)
	}
	return max(n*p/100, 100)
}

func (s *server) prioritize(w http.ResponseWriter, r *http.Request) {
	var args filterArgs
	if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	scores := []hostPriority{}
	if args.NodeNames != nil {
		scores = make([]hostPriority, len(*args.NodeNames))
		for i, name := range *args.NodeNames {
			scores[i].Host = name
		}
	}
	writeJSON(w, scores)
}

func (s *server) bind(w http.ResponseWriter, r *http.Request) {
	var args bindArgs
	if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
		writeJSON(w, bindResult{Error: err.Error()})
		return
	}
	if s.inventory != nil {
		if err := s.allocate(args); err != nil {
			writeJSON(w, bindResult{Error: err.Error()})
			return
		}
	}
	binding, _ := json.Marshal(map[string]any{
		"apiVersion": "v1",
		"kind":       "Binding",
		"metadata":   map[string]any{"name": args.PodName, "namespace": args.PodNamespace, "uid": args.PodUID},
		"target":     map[string]any{"apiVersion": "v1", "kind": "Node", "name": args.Node},
	})
	path := fmt.Sprintf("/api/v1/namespaces/%s/pods/%s/binding", args.PodNamespace, args.PodName)
	if _, err := s.send(http.MethodPost, path, binding, true, http.StatusCreated); err != nil {
		writeJSON(w, bindResult{Error: "binding: " + err.Error()})
		return
	}
	writeJSON(w, bindResult{})
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8888", "address to serve the extender verbs on")
	api := flag.String("server", "", "kube-apiserver URL")
	caFile := flag.String("ca", "", "kube-apiserver's CA certificate (PEM)")
	tokenFile := flag.String("token-file", "", "file holding a bearer token allowed to create pods/binding")
	qps := flag.Float64("qps", 50, "API client rate limit")
	burst := flag.Int("burst", 100, "API client burst")
	percentage := flag.Int("percentage-of-nodes-to-score", 0, "share of the nodes filter passes on (0: adaptive)")
	writeClaims := flag.Bool("write-claims", false, "allocate each pod's claim through the API before binding")
	deviceScoring := flag.String("device-scoring", "prioritize", "prioritize, or filter: pass on one node")
	flag.Parse()
	if *deviceScoring != "prioritize" && *deviceScoring != "filter" {
		log.Fatalf("--device-scoring: %q is neither prioritize nor filter", *deviceScoring)
	}

	ca, err := os.ReadFile(*caFile)
	if err != nil {
		log.Fatal(err)
	}
	token, err := os.ReadFile(*tokenFile)
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	transport := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 64,
	}
	s := &server{
		percentage: *percentage,
		oneNode:    *deviceScoring == "filter",
		api:        *api,
		token:      string(bytes.TrimSpace(token)),
		client:     &http.Client{Transport: transport, Timeout: 30 * time.Second},
		watcher:    &http.Client{Transport: transport},
		limit:      &bucket{qps: *qps, burst: float64(*burst), tokens: float64(*burst), last: time.Now()},
	}
	if *writeClaims {
		s.inventory = newInventory()
		s.startWatches()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /scheduler/filter", s.filter)
	mux.HandleFunc("POST /scheduler/prioritize", s.prioritize)
	mux.HandleFunc("POST /scheduler/bind", s.bind)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if s.inventory != nil && !s.inventory.ready() {
			http.Error(w, "listing", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
	log.Printf("null extender on %s", *listen)
	log.Fatal(http.ListenAndServe(*listen, mux))
}
