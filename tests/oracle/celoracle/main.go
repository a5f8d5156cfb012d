// Command celoracle answers, for each CEL selector expression and device it reads (one JSON object per
// line on stdin), what upstream's DRA CEL environment does with it: the expression is compiled with
// k8s.io/dynamic-resource-allocation/cel GetCompiler(...).CompileCELExpression, the StoredExpressions
// environment the scheduler uses, and evaluated on the device with DeviceMatches, like the structured
// allocator's selector check. One JSON answer per line on stdout:
//
//	{"kind": "compile", "error": "..."}  the expression does not compile
//	{"kind": "value", "value": true}     it evaluates to a bool
//	{"kind": "eval", "error": "..."}     evaluation fails (runtime error, cost limit, non-bool result)
//	{"kind": "badinput", "error": "..."} the input line does not decode
//
// The answer for a compiled expression also carries "maxCost", upstream's estimated worst-case cost (what
// API validation holds against CELSelectorExpressionMaxCost). With "derived": true the expression is
// compiled as a derived attribute and only compiled: the answer is {"kind": "value", "maxCost": N}
// (or the compile error).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
)

type device struct {
	Driver                   string                                                    `json:"driver"`
	AllowMultipleAllocations bool                                                      `json:"allowMultipleAllocations"`
	Attributes               map[resourceapi.QualifiedName]resourceapi.DeviceAttribute `json:"attributes"`
	Capacity                 map[resourceapi.QualifiedName]resourceapi.DeviceCapacity  `json:"capacity"`
}

type query struct {
	Expression string `json:"expression"`
	Device     device `json:"device"`
	// Derived compiles the expression as a derived attribute (KEP-6080: its result may be a scalar or a
	// list), as API validation compiles a request's derivedAttributes[].expression.
	Derived bool `json:"derived,omitempty"`
}

type answer struct {
	Kind    string  `json:"kind"`
	Value   *bool   `json:"value,omitempty"`
	Error   string  `json:"error,omitempty"`
	MaxCost *uint64 `json:"maxCost,omitempty"`
}

// The features of the scheduler with every DRA beta and alpha gate on: the widest device type.
var compiler = cel.GetCompiler(cel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: true})

func run(q query) answer {
	result := compiler.CompileCELExpression(q.Expression, cel.Options{DerivedAttribute: q.Derived})
	if result.Error != nil {
		return answer{Kind: "compile", Error: result.Error.Error()}
	}
	maxCost := result.MaxCost
	allow := q.Device.AllowMultipleAllocations
	if q.Derived {
		return answer{Kind: "value", MaxCost: &maxCost}
	}
	matches, _, err := result.DeviceMatches(context.Background(), cel.Device{
		Driver:                   q.Device.Driver,
		AllowMultipleAllocations: &allow,
		Attributes:               q.Device.Attributes,
		Capacity:                 q.Device.Capacity,
	})
	if err != nil {
		return answer{Kind: "eval", Error: err.Error(), MaxCost: &maxCost}
	}
	return answer{Kind: "value", Value: &matches, MaxCost: &maxCost}
}

func main() {
	in := bufio.NewReader(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for {
		line, err := in.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var q query
			d := json.NewDecoder(bytes.NewReader(line))
			d.DisallowUnknownFields()
			var a answer
			if derr := d.Decode(&q); derr != nil {
				a = answer{Kind: "badinput", Error: derr.Error()}
			} else {
				a = run(q)
			}
			if eerr := out.Encode(a); eerr != nil {
				os.Exit(1)
			}
		}
		if err != nil {
			return
		}
	}
}
