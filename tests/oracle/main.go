// Command oracle answers allocation questions with the upstream structured allocator
// (k8s.io/dynamic-resource-allocation/structured), the way kube-scheduler's DRA plugin calls it.
//
// Protocol: one JSON state per stdin line, one JSON answer per stdout line, until stdin closes.
// A state carries the feature gates (upstream gate names), the claims' Namespaces (ignored), the node,
// DeviceClasses, ResourceSlices, DeviceTaintRules, the claims to allocate and the allocation results of
// claims already allocated.
// An answer is {"kind": "results", "results": [...]}, {"kind": "nofit"}, {"kind": "nodelocal",
// "error": ...} (ErrFailedAllocationOnNode), {"kind": "error", "error": ...} or {"kind": "badinput",
// "error": ...} when the line could not be decoded.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// filterTimeout is kube-scheduler's default DRA filter timeout: a search still running then is an error.
const filterTimeout = 10 * time.Second

// state is one question. Namespaces are read and ignored: kube-scheduler never looks at the admin-access
// label (admission checks it when a claim is created); the product checks it before allocating.
type state struct {
	Gates      map[string]bool                `json:"gates"`
	Namespaces []v1.Namespace                 `json:"namespaces"`
	Node       v1.Node                        `json:"node"`
	Classes    []*resourceapi.DeviceClass     `json:"classes"`
	Slices     []*resourceapi.ResourceSlice   `json:"slices"`
	TaintRules []*resourceapi.DeviceTaintRule `json:"taintRules"`
	Claims     []*resourceapi.ResourceClaim   `json:"claims"`
	Allocated  []resourceapi.AllocationResult `json:"allocated"`
}

type answer struct {
	Kind    string                         `json:"kind"`
	Results []resourceapi.AllocationResult `json:"results,omitempty"`
	Error   string                         `json:"error,omitempty"`
}

// features maps gates to the allocator's feature set as the scheduler plugin's AllocatorFeatures does.
func features(gates map[string]bool) structured.Features {
	return structured.Features{
		AdminAccess:             gates["DRAAdminAccess"],
		PrioritizedList:         gates["DRAPrioritizedList"],
		PartitionableDevices:    gates["DRAPartitionableDevices"],
		DeviceTaints:            gates["DRADeviceTaints"],
		DeviceBindingAndStatus:  gates["DRADeviceBindingConditions"] && gates["DRAResourceClaimDeviceStatus"],
		ConsumableCapacity:      gates["DRAConsumableCapacity"],
		FractionalCapacityRange: gates["DRAFractionalCapacityRange"],
		ListTypeAttributes:      gates["DRAListTypeAttributes"],
		OptionalNodeOperations:  gates["DRAOptionalNodeOperations"],
		DerivedAttributes:       gates["DRADerivedAttributes"],
		CompatibilityGroups:     gates["DRADeviceCompatibilityGroups"],
	}
}

type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	classes := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		classes = append(classes, c)
	}
	return classes, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	// The scheduler's informer lister names the resource in the singular.
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclass"), name)
}

// allocatedState is what the scheduler's claim tracker gathers from allocated claims
// (GatherAllocatedState with foreachAllocatedDevice): admin-access results do not count; with
// consumable capacity, results with a share ID are shares whose consumed capacity adds up.
func allocatedState(allocations []resourceapi.AllocationResult, consumable bool) structured.AllocatedState {
	s := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, allocation := range allocations {
		for _, r := range allocation.Devices.Results {
			if r.AdminAccess != nil && *r.AdminAccess {
				continue
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if consumable && r.ShareID != nil {
				s.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
				if r.ConsumedCapacity != nil {
					s.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
				}
				continue
			}
			s.AllocatedDevices.Insert(id)
		}
	}
	return s
}

// patchedSlices adds DeviceTaintRule taints to the devices they select, as the scheduler's
// ResourceSlice tracker does (resourceslice/tracker applyPatches): a rule without deviceSelector
// selects nothing; each set field of the selector must equal the device's driver, pool or name.
func patchedSlices(slices []*resourceapi.ResourceSlice, rules []*resourceapi.DeviceTaintRule) []*resourceapi.ResourceSlice {
	out := make([]*resourceapi.ResourceSlice, 0, len(slices))
	for _, slice := range slices {
		patched := slice.DeepCopy()
		for _, rule := range rules {
			sel := rule.Spec.DeviceSelector
			if sel == nil ||
				(sel.Driver != nil && *sel.Driver != slice.Spec.Driver) ||
				(sel.Pool != nil && *sel.Pool != slice.Spec.Pool.Name) {
				continue
			}
			for i := range patched.Spec.Devices {
				if sel.Device != nil && *sel.Device != patched.Spec.Devices[i].Name {
					continue
				}
				patched.Spec.Devices[i].Taints = append(patched.Spec.Devices[i].Taints, rule.Spec.Taint)
			}
		}
		out = append(out, patched)
	}
	return out
}

// caches holds one CEL cache per compiler feature set: compiled programs depend on it.
var caches = map[cel.Features]*cel.Cache{}

func celCache(gates map[string]bool) *cel.Cache {
	f := cel.Features{
		EnableConsumableCapacity: gates["DRAConsumableCapacity"],
		EnableListTypeAttributes: gates["DRAListTypeAttributes"],
	}
	if caches[f] == nil {
		caches[f] = cel.NewCache(1000, f)
	}
	return caches[f]
}

func allocate(s *state) answer {
	ctx, cancel := context.WithTimeout(context.Background(), filterTimeout)
	defer cancel()
	slices := s.Slices
	if s.Gates["DRADeviceTaintRules"] {
		slices = patchedSlices(slices, s.TaintRules)
	}
	classes := classLister{}
	for _, c := range s.Classes {
		classes[c.Name] = c
	}
	allocated := allocatedState(s.Allocated, s.Gates["DRAConsumableCapacity"])
	allocator, err := structured.NewAllocator(ctx, features(s.Gates), allocated, classes, slices, celCache(s.Gates))
	if err != nil {
		return answer{Kind: "error", Error: err.Error()}
	}
	results, err := allocator.Allocate(ctx, &s.Node, s.Claims)
	switch {
	case errors.Is(err, structured.ErrFailedAllocationOnNode):
		return answer{Kind: "nodelocal", Error: err.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		return answer{Kind: "timeout", Error: err.Error()}
	case err != nil:
		return answer{Kind: "error", Error: err.Error()}
	case results == nil:
		return answer{Kind: "nofit"}
	}
	return answer{Kind: "results", Results: results}
}

func decode(line []byte) (*state, error) {
	var s state
	d := json.NewDecoder(bytes.NewReader(line))
	d.DisallowUnknownFields() // a generator typo must not pass silently as an absent field
	if err := d.Decode(&s); err != nil {
		return nil, err
	}
	return &s, nil
}

func main() {
	in := bufio.NewReader(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for {
		line, err := in.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var a answer
			if s, derr := decode(line); derr != nil {
				a = answer{Kind: "badinput", Error: derr.Error()}
			} else {
				a = allocate(s)
			}
			if werr := out.Encode(a); werr != nil {
				fmt.Fprintln(os.Stderr, "oracle: write:", werr)
				os.Exit(1)
			}
		}
		if err != nil {
			return
		}
	}
}
