package main

// --write-claims: the bind writes what kube-scheduler's in-tree PreBind writes for a pod with one
// claim (the claim's finalizer, then its allocation and reservedFor, then the Binding), on a device
// picked without any search. Behind the extender's kube-scheduler configuration, its throughput is the
// ceiling of any extender that allocates through the API as upstream does: kube-scheduler's cycle, the
// HTTP round trips and the API server's work for those writes, with no allocator in them.

import (
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/url"
	"sync"
	"time"
)

const finalizer = "resource.kubernetes.io/delete-protection"

// inventory is what the watches have seen: each node's devices (one ResourceSlice per node, as the
// benchmark publishes), the claims by the pod that owns them (template claims), and the devices
// allocated or being allocated.
type inventory struct {
	mu      sync.Mutex
	drivers map[string]string
	devices map[string][]string
	claims  map[string]map[string]any
	used    map[string]map[string]bool
}

func newInventory() *inventory {
	return &inventory{
		drivers: map[string]string{},
		devices: map[string][]string{},
		claims:  map[string]map[string]any{},
		used:    map[string]map[string]bool{},
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

func (inv *inventory) applySlice(event string, slice map[string]any) {
	node := text(slice, "spec", "nodeName")
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if event == "DELETED" {
		delete(inv.devices, node)
		return
	}
	var names []string
	devices, _ := field(slice, "spec", "devices").([]any)
	for _, d := range devices {
		if m, ok := d.(map[string]any); ok {
			names = append(names, text(m, "name"))
		}
	}
	inv.drivers[node] = text(slice, "spec", "driver")
	inv.devices[node] = names
}

// allocated is the (pool, device) pairs of a claim's allocation.
func allocated(claim map[string]any) [][2]string {
	var pairs [][2]string
	results, _ := field(claim, "status", "allocation", "devices", "results").([]any)
	for _, r := range results {
		if m, ok := r.(map[string]any); ok {
			pairs = append(pairs, [2]string{text(m, "pool"), text(m, "device")})
		}
	}
	return pairs
}

func (inv *inventory) applyClaim(event string, claim map[string]any) {
	owners, _ := field(claim, "metadata", "ownerReferences").([]any)
	podUID := ""
	for _, o := range owners {
		if m, ok := o.(map[string]any); ok && text(m, "kind") == "Pod" {
			podUID = text(m, "uid")
		}
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	for _, pair := range allocated(claim) {
		if inv.used[pair[0]] == nil {
			inv.used[pair[0]] = map[string]bool{}
		}
		inv.used[pair[0]][pair[1]] = event != "DELETED"
	}
	if podUID == "" {
		return
	}
	if event == "DELETED" {
		delete(inv.claims, podUID)
	} else {
		inv.claims[podUID] = claim
	}
}

func (inv *inventory) free(node string) int {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	n := 0
	for _, d := range inv.devices[node] {
		if !inv.used[node][d] {
			n++
		}
	}
	return n
}

// pick marks a free device of node as used and returns it with its driver ("" when none is free).
func (inv *inventory) pick(node string) (string, string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	for _, d := range inv.devices[node] {
		if !inv.used[node][d] {
			if inv.used[node] == nil {
				inv.used[node] = map[string]bool{}
			}
			inv.used[node][d] = true
			return d, inv.drivers[node]
		}
	}
	return "", ""
}

func (inv *inventory) release(node, device string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	delete(inv.used[node], device)
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

// watch lists path and watches it from there (relisting when the watch expires), handing every object
// to apply.
func (s *server) watch(path string, apply func(event string, obj map[string]any)) {
	version := ""
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
			for _, item := range list.Items {
				apply("ADDED", item)
			}
			version = list.Metadata.ResourceVersion
		}
		query := url.Values{"watch": {"true"}, "allowWatchBookmarks": {"true"}, "resourceVersion": {version}}
		request, _ := http.NewRequest(http.MethodGet, s.api+path+"?"+query.Encode(), nil)
		request.Header.Set("Authorization", "Bearer "+s.token)
		response, err := s.watcher.Do(request)
		if err != nil {
			log.Printf("watch %s: %v", path, err)
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
				break
			}
			if event.Type == "ERROR" {
				version = "" // expired: list again
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
	go s.watch("/apis/resource.k8s.io/v1/resourceslices", s.inventory.applySlice)
	go s.watch("/apis/resource.k8s.io/v1/resourceclaims", s.inventory.applyClaim)
}

// writeClaim allocates device of node to the pod's claim and reserves the claim for the pod: the
// finalizer first, then the status, as the in-tree PreBind.
func (s *server) writeClaim(args bindArgs, device, driver string) error {
	claim, err := s.inventory.claimOf(args.PodUID)
	if err != nil {
		return err
	}
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
			return err
		}
		body = map[string]any{}
		if err := json.Unmarshal(answer, &body); err != nil {
			return err
		}
	}
	body["status"] = map[string]any{
		"allocation": map[string]any{
			"devices": map[string]any{"results": []any{map[string]any{
				"request": "gpu", "driver": driver, "pool": args.Node, "device": device,
			}}},
			"nodeSelector": map[string]any{"nodeSelectorTerms": []any{map[string]any{
				"matchFields": []any{map[string]any{
					"key": "metadata.name", "operator": "In", "values": []any{args.Node},
				}},
			}}},
		},
		"reservedFor": []any{map[string]any{"resource": "pods", "name": args.PodName, "uid": args.PodUID}},
	}
	raw, _ = json.Marshal(body)
	_, err = s.send(http.MethodPut, path+"/status", raw, true, http.StatusOK)
	return err
}
