package main

// --write-claims: the bind allocates the pod's one claim through the API as kube-scheduler's in-tree
// PreBind writes it (the claim's finalizer with an update, then its allocation and reservedFor with an
// update of its status, then the Binding), on the first free device of the node, without any search.
// Behind the extender's kube-scheduler configuration, its throughput is the ceiling of an extender that
// allocates through the API as upstream does, with JSON as the extender does (kube-scheduler's client
// sends protobuf, which costs kube-apiserver less): kube-scheduler's cycle, the HTTP round trips and the
// API server's work for those writes, with no allocator in them. A write that conflicts fails the bind
// (kube-scheduler retries the pod) where upstream re-reads the claim and writes again.

import (
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

const finalizer = "resource.kubernetes.io/delete-protection"

// maybeWritten is a status update, sent over the claim's resourceVersion sent, that kube-apiserver did
// not answer (it went away): the allocation may be stored.
type maybeWritten struct {
	sent int64
	err  error
}

func (e maybeWritten) Error() string { return "the allocation may have been written: " + e.err.Error() }
func (e maybeWritten) Unwrap() error { return e.err }

// slot is one device: its pool and name.
type slot struct{ pool, device string }

// nodeDevices is what a node's ResourceSlice publishes (the benchmark publishes one per node).
type nodeDevices struct {
	driver, pool string
	devices      []string
}

// unsure is a device picked for a status update kube-apiserver did not answer, written over the
// claim's resourceVersion sent: any later version of the claim says whether it was stored.
type unsure struct {
	taken slot
	sent  int64
}

// inventory is what the watches have seen, plus the binds' own writes before the watch brings them
// back: each node's devices, each pod's claim (template claims, by the owning pod's UID), the devices
// each claim holds and the devices binds are allocating right now.
type inventory struct {
	mu      sync.Mutex
	nodes   map[string]nodeDevices
	claims  map[string]map[string]any // pod UID -> its claim
	holds   map[string][]slot         // claim UID -> its allocated devices
	seen    map[string]int64          // claim UID -> the resourceVersion held
	used    map[slot]int              // how many claims hold each device (one, or a bug)
	picked  map[slot]bool             // devices binds in progress are allocating
	unsure  map[string]unsure         // claim UID -> a status update with no answer, its device picked
	synced  atomic.Int32              // watches that have listed once
	watches int32
}

func newInventory() *inventory {
	return &inventory{
		nodes:  map[string]nodeDevices{},
		claims: map[string]map[string]any{},
		holds:  map[string][]slot{},
		seen:   map[string]int64{},
		used:   map[slot]int{},
		picked: map[slot]bool{},
		unsure: map[string]unsure{},
	}
}

func field(obj map[string]any, path ...string) any {
	var value any = obj
	for _, key := range path {
		m, ok := value.(map[string]any)
		if !ok {
			return nil
		}
		value = m[key]
	}
	return value
}

func text(obj map[string]any, path ...string) string {
	s, _ := field(obj, path...).(string)
	return s
}

func (inv *inventory) ready() bool { return inv.synced.Load() == inv.watches }

// applySlice sets or (DELETED) forgets the devices of the slice's node.
func (inv *inventory) applySlice(event string, slice map[string]any) {
	node := text(slice, "spec", "nodeName")
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if event == "DELETED" {
		delete(inv.nodes, node)
		return
	}
	published := nodeDevices{driver: text(slice, "spec", "driver"), pool: text(slice, "spec", "pool", "name")}
	devices, _ := field(slice, "spec", "devices").([]any)
	for _, d := range devices {
		if m, ok := d.(map[string]any); ok {
			published.devices = append(published.devices, text(m, "name"))
		}
	}
	inv.nodes[node] = published
}

func (inv *inventory) resetSlices(int64) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.nodes = map[string]nodeDevices{}
}

// allocated is the devices of a claim's allocation.
func allocated(claim map[string]any) []slot {
	var slots []slot
	results, _ := field(claim, "status", "allocation", "devices", "results").([]any)
	for _, r := range results {
		if m, ok := r.(map[string]any); ok {
			slots = append(slots, slot{text(m, "pool"), text(m, "device")})
		}
	}
	return slots
}

func owner(claim map[string]any) string {
	owners, _ := field(claim, "metadata", "ownerReferences").([]any)
	for _, o := range owners {
		if m, ok := o.(map[string]any); ok && text(m, "kind") == "Pod" {
			return text(m, "uid")
		}
	}
	return ""
}

// hold sets the devices claim uid holds (under mu).
func (inv *inventory) hold(uid string, slots []slot) {
	for _, s := range inv.holds[uid] {
		if inv.used[s]--; inv.used[s] <= 0 {
			delete(inv.used, s)
		}
	}
	delete(inv.holds, uid)
	if len(slots) > 0 {
		inv.holds[uid] = slots
		for _, s := range slots {
			inv.used[s]++
		}
	}
}

func (inv *inventory) applyClaim(event string, claim map[string]any) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.apply(event, claim)
}

// apply is applyClaim under mu.
func (inv *inventory) apply(event string, claim map[string]any) {
	uid := text(claim, "metadata", "uid")
	version, _ := strconv.ParseInt(text(claim, "metadata", "resourceVersion"), 10, 64)
	if u, ok := inv.unsure[uid]; ok && (event == "DELETED" || version > u.sent) {
		delete(inv.picked, u.taken) // stored (held below) or not: the pick is over
		delete(inv.unsure, uid)
	}
	if event == "DELETED" {
		inv.hold(uid, nil)
		delete(inv.seen, uid)
		delete(inv.claims, owner(claim))
		return
	}
	if version <= inv.seen[uid] {
		// Older than a bind's own write, which the watch delivers after the versions before it: it would
		// free the device the write allocated.
		return
	}
	inv.seen[uid] = version
	inv.hold(uid, allocated(claim))
	if pod := owner(claim); pod != "" {
		inv.claims[pod] = claim
	}
}

// resetClaims forgets the claims before a list at resourceVersion listed is applied, but for those a
// bind wrote after it: the list does not have them yet.
func (inv *inventory) resetClaims(listed int64) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	for uid, version := range inv.seen {
		if version <= listed {
			inv.hold(uid, nil)
			delete(inv.seen, uid)
		}
	}
	for pod, claim := range inv.claims {
		if _, kept := inv.seen[text(claim, "metadata", "uid")]; !kept {
			delete(inv.claims, pod)
		}
	}
}

// firstFree is node's first device that no claim holds and no bind is allocating, with its driver;
// ok is false when there is none (under mu).
func (inv *inventory) firstFree(node string) (free slot, driver string, ok bool) {
	published := inv.nodes[node]
	for _, d := range published.devices {
		if s := (slot{published.pool, d}); inv.used[s] == 0 && !inv.picked[s] {
			return s, published.driver, true
		}
	}
	return slot{}, "", false
}

func (inv *inventory) free(node string) bool {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	_, _, ok := inv.firstFree(node)
	return ok
}

// pick takes a free device of node for a bind in progress (until done); ok is false when none is free.
func (inv *inventory) pick(node string) (taken slot, driver string, ok bool) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if taken, driver, ok = inv.firstFree(node); ok {
		inv.picked[taken] = true
	}
	return taken, driver, ok
}

// done ends a bind's pick of taken for claim claimUID. written is the claim as the bind's status update
// returned it (nil: failed), held from now on as the watch will deliver it. An update kube-apiserver did
// not answer (err a maybeWritten) keeps the device picked until the claim's next version shows whether it
// was stored.
func (inv *inventory) done(claimUID string, taken slot, written map[string]any, err error) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	var maybe maybeWritten
	if errors.As(err, &maybe) {
		inv.unsure[claimUID] = unsure{taken, maybe.sent}
		return
	}
	if _, known := inv.seen[text(written, "metadata", "uid")]; written != nil && known { // not deleted
		inv.apply("MODIFIED", written)
	}
	delete(inv.picked, taken)
}

// allocatedOn is the node the claim of pod podUID is allocated on ("" when it is not allocated).
func (inv *inventory) allocatedOn(podUID string) string {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return allocatedNode(inv.claims[podUID])
}

// claimOf is the claim of pod podUID, waiting a while for the watch to deliver it.
func (inv *inventory) claimOf(podUID string) (map[string]any, error) {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		inv.mu.Lock()
		claim := inv.claims[podUID]
		inv.mu.Unlock()
		if claim != nil {
			return claim, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no ResourceClaim owned by pod %s", podUID)
		}
	}
}

// watch lists path and watches it from there, listing again (after reset) when the watch's
// resourceVersion is gone or the watch fails, and hands every object to apply.
func (s *server) watch(path string, reset func(listed int64), apply func(event string, obj map[string]any)) {
	version, listed := "", false
	for {
		if version == "" {
			var list struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
				Items []map[string]any `json:"items"`
			}
			body, err := s.send(http.MethodGet, path, nil, false, http.StatusOK)
			if err == nil {
				err = json.Unmarshal(body, &list)
			}
			if err != nil {
				log.Printf("list %s: %v", path, err)
				time.Sleep(time.Second)
				continue
			}
			at, _ := strconv.ParseInt(list.Metadata.ResourceVersion, 10, 64)
			reset(at)
			for _, item := range list.Items {
				apply("ADDED", item)
			}
			version = list.Metadata.ResourceVersion
			if !listed {
				listed = true
				s.inventory.synced.Add(1)
			}
		}
		query := url.Values{"watch": {"true"}, "allowWatchBookmarks": {"true"}, "resourceVersion": {version}}
		request, _ := http.NewRequest(http.MethodGet, s.api+path+"?"+query.Encode(), nil)
		request.Header.Set("Authorization", "Bearer "+s.token)
		response, err := s.watcher.Do(request)
		if err != nil || response.StatusCode != http.StatusOK {
			if err == nil {
				response.Body.Close()
				err = fmt.Errorf("%s", response.Status)
			}
			log.Printf("watch %s: %v", path, err)
			version = ""
			time.Sleep(time.Second)
			continue
		}
		decoder := json.NewDecoder(response.Body)
		for {
			var event struct {
				Type   string         `json:"type"`
				Object map[string]any `json:"object"`
			}
			if decoder.Decode(&event) != nil {
				break // the server ended the watch: go on from the last version seen
			}
			if event.Type == "ERROR" {
				version = "" // gone: list again
				break
			}
			if v := text(event.Object, "metadata", "resourceVersion"); v != "" {
				version = v
			}
			if event.Type != "BOOKMARK" {
				apply(event.Type, event.Object)
			}
		}
		response.Body.Close()
	}
}

func (s *server) startWatches() {
	inv := s.inventory
	inv.watches = 2
	go s.watch("/apis/resource.k8s.io/v1/resourceslices", inv.resetSlices, inv.applySlice)
	go s.watch("/apis/resource.k8s.io/v1/resourceclaims", inv.resetClaims, inv.applyClaim)
}

// allocatedNode is the node of the nodeSelector this extender writes (metadata.name In [node]).
func allocatedNode(claim map[string]any) string {
	terms, _ := field(claim, "status", "allocation", "nodeSelector", "nodeSelectorTerms").([]any)
	for _, t := range terms {
		term, _ := t.(map[string]any)
		fields, _ := term["matchFields"].([]any)
		for _, f := range fields {
			if m, ok := f.(map[string]any); ok {
				if values, _ := m["values"].([]any); len(values) == 1 {
					node, _ := values[0].(string)
					return node
				}
			}
		}
	}
	return ""
}

func reserves(claim map[string]any, podUID string) bool {
	reserved, _ := field(claim, "status", "reservedFor").([]any)
	for _, r := range reserved {
		if m, ok := r.(map[string]any); ok && text(m, "uid") == podUID {
			return true
		}
	}
	return false
}

// allocate makes sure the pod's claim is allocated on args.Node and reserved for the pod: a retried bind
// whose claim an earlier attempt wrote goes straight on to the Binding.
func (s *server) allocate(args bindArgs) error {
	claim, err := s.inventory.claimOf(args.PodUID)
	if err != nil {
		return err
	}
	if reserves(claim, args.PodUID) {
		if node := allocatedNode(claim); node != args.Node {
			return fmt.Errorf("the pod's claim is allocated on %s, not %s", node, args.Node)
		}
		return nil
	}
	taken, driver, ok := s.inventory.pick(args.Node)
	if !ok {
		return fmt.Errorf("no free device on %s", args.Node)
	}
	written, err := s.writeClaim(claim, args, taken, driver)
	s.inventory.done(text(claim, "metadata", "uid"), taken, written, err)
	return err
}

// writeClaim writes the finalizer, then the allocation of taken and reservedFor; returns the claim as
// the status update returned it.
func (s *server) writeClaim(claim map[string]any, args bindArgs, taken slot, driver string) (map[string]any, error) {
	var body map[string]any
	raw, _ := json.Marshal(claim)
	_ = json.Unmarshal(raw, &body) // a copy: the inventory's stays as the watch delivered it
	path := fmt.Sprintf("/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s",
		text(body, "metadata", "namespace"), text(body, "metadata", "name"))
	meta := body["metadata"].(map[string]any)
	finalizers, _ := meta["finalizers"].([]any)
	has := false
	for _, f := range finalizers {
		has = has || f == finalizer
	}
	if !has {
		meta["finalizers"] = append(finalizers, finalizer)
		raw, _ = json.Marshal(body)
		answer, err := s.send(http.MethodPut, path, raw, true, http.StatusOK)
		if err != nil {
			return nil, err
		}
		body = map[string]any{}
		if err := json.Unmarshal(answer, &body); err != nil {
			return nil, err
		}
	}
	body["status"] = map[string]any{
		"allocation": map[string]any{
			"devices": map[string]any{"results": []any{map[string]any{
				"request": "gpu", "driver": driver, "pool": taken.pool, "device": taken.device,
			}}},
			"nodeSelector": map[string]any{"nodeSelectorTerms": []any{map[string]any{
				"matchFields": []any{map[string]any{
					"key": "metadata.name", "operator": "In", "values": []any{args.Node},
				}},
			}}},
			"allocationTimestamp": time.Now().UTC().Format(time.RFC3339),
		},
		"reservedFor": []any{map[string]any{"resource": "pods", "name": args.PodName, "uid": args.PodUID}},
	}
	raw, _ = json.Marshal(body)
	answer, err := s.send(http.MethodPut, path+"/status", raw, true, http.StatusOK)
	if err != nil {
		if errors.As(err, new(unanswered)) {
			sent, _ := strconv.ParseInt(text(body, "metadata", "resourceVersion"), 10, 64)
			return nil, maybeWritten{sent, err}
		}
		return nil, err
	}
	written := map[string]any{}
	if err := json.Unmarshal(answer, &written); err != nil {
		return nil, err
	}
	return written, nil
}
