// Package healthcheck evaluates an Argo CD resource health script (health.lua) on a Kubernetes
// object the way the Argo CD application controller does, so a script's tests exercise the same
// interpreter, library set, input conversion and result decoding:
//
//   - interpreter: github.com/yuin/gopher-lua (the version Argo CD pins, see go.mod);
//   - libraries: a script installed through argocd-cm runs with the standard libraries skipped,
//     then only `package`, `base`, `table` and a reduced `os` (just os.time and os.date, also
//     reachable through require("os")) are opened. `string`, `math`, `io` and the rest of `os`
//     are absent unless resource.customizations.useOpenLibs.<group>_<Kind> is set (Options.OpenLibs);
//     Argo CD's built-in scripts always run with open libraries;
//   - input: the live object is the global `obj`; maps become tables, lists become array tables,
//     every number (int64 or float64 in an unstructured object) becomes a Lua number, null is nil;
//   - limits: the whole run is bounded by a one-second context;
//   - output: the value on top of the stack must be a table; it is JSON-encoded with
//     layeh.com/gopher-json and decoded into {status, message}; a status outside the known set
//     becomes Unknown with the message "Lua returned an invalid health status".
//
// ArgoCD adds the step the controller takes before any script: an object being deleted is
// Progressing "Pending deletion" whatever the script says.
package healthcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	lua "github.com/yuin/gopher-lua"
	luajson "layeh.com/gopher-json"
	"sigs.k8s.io/yaml"
)

// Status is the health Argo CD records for a resource.
type Status struct {
	Status  string `json:"status,omitempty"`
	Message string `json:"message,omitempty"`
}

// Options says how the script is installed.
type Options struct {
	// OpenLibs: the Lua standard libraries are open (built-in scripts, or argocd-cm with
	// resource.customizations.useOpenLibs.<group>_<Kind>: "true"). False is the argocd-cm default.
	OpenLibs bool
	// Timeout for one evaluation; zero means Argo CD's one second.
	Timeout time.Duration
}

// Statuses Argo CD accepts from a script.
var Statuses = map[string]bool{
	"Healthy": true, "Progressing": true, "Degraded": true, "Suspended": true, "Missing": true, "Unknown": true,
}

// InvalidStatusMessage is what Argo CD reports for a status outside Statuses.
const InvalidStatusMessage = "Lua returned an invalid health status"

// hookFinalizer exempts Argo CD hook resources from the "Pending deletion" short-cut.
const hookFinalizer = "argocd.argoproj.io/hook-finalizer"

// reducedOS holds gopher-lua's own os.time and os.date, the only os functions a script gets.
var reducedOS = func() map[string]lua.LGFunction {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	l.Push(l.NewFunction(lua.OpenOs))
	l.Push(lua.LString(lua.OsLibName))
	l.Call(1, 0)
	full, ok := l.GetGlobal(lua.OsLibName).(*lua.LTable)
	if !ok {
		panic("gopher-lua did not register the os library")
	}
	funcs := map[string]lua.LGFunction{}
	for _, name := range []string{"time", "date"} {
		fn, ok := full.RawGetString(name).(*lua.LFunction)
		if !ok || fn.GFunction == nil {
			panic("gopher-lua has no os." + name)
		}
		funcs[name] = fn.GFunction
	}
	return funcs
}()

func openReducedOS(l *lua.LState) int {
	l.Push(l.RegisterModule(lua.OsLibName, reducedOS))
	return 1
}

// Run evaluates the script on obj and returns the health it reports. Like Argo CD, an empty table
// (encoded as a JSON array) or a non-string message is an error, not a status.
func Run(script string, obj map[string]any, opts Options) (*Status, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: !opts.OpenLibs})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		{lua.OsLibName, openReducedOS},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return nil, fmt.Errorf("opening %s: %w", lib.name, err)
		}
	}
	l.PreloadModule(lua.OsLibName, openReducedOS)

	timeout := opts.Timeout
	if timeout == 0 {
		timeout = time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", toLua(l, obj))
	if err := l.DoString(script); err != nil {
		return nil, err
	}
	result := l.Get(-1)
	if result.Type() != lua.LTTable {
		return nil, fmt.Errorf("expect table output from Lua script, not %s", result.Type().String())
	}
	encoded, err := luajson.Encode(result)
	if err != nil {
		return nil, err
	}
	status := &Status{}
	if err := json.Unmarshal(encoded, status); err != nil {
		return nil, err
	}
	if !Statuses[status.Status] {
		return &Status{Status: "Unknown", Message: InvalidStatusMessage}, nil
	}
	return status, nil
}

// ArgoCD is the health the Argo CD UI shows for obj when the script is installed: deletion first,
// then the script. An error is shown as Unknown with the error text, as Argo CD does.
func ArgoCD(script string, obj map[string]any, opts Options) (*Status, error) {
	meta, _ := obj["metadata"].(map[string]any)
	if meta["deletionTimestamp"] != nil && !hasFinalizer(meta, hookFinalizer) {
		return &Status{Status: "Progressing", Message: "Pending deletion"}, nil
	}
	status, err := Run(script, obj, opts)
	if err != nil {
		return &Status{Status: "Unknown", Message: err.Error()}, err
	}
	return status, nil
}

func hasFinalizer(meta map[string]any, name string) bool {
	list, _ := meta["finalizers"].([]any)
	for _, item := range list {
		if item == name {
			return true
		}
	}
	return false
}

// toLua converts a decoded object into Lua values the way Argo CD feeds `obj` to a script.
func toLua(l *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case nil:
		return lua.LNil
	case bool:
		return lua.LBool(v)
	case string:
		return lua.LString(v)
	case json.Number:
		// Argo CD hands json.Number over as a string; LoadObject never produces one.
		return lua.LString(v)
	case int:
		return lua.LNumber(v)
	case int32:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case []any:
		arr := l.CreateTable(len(v), 0)
		for _, item := range v {
			arr.Append(toLua(l, item))
		}
		return arr
	case map[string]any:
		tbl := l.CreateTable(0, len(v))
		for key, item := range v {
			tbl.RawSetH(lua.LString(key), toLua(l, item))
		}
		return tbl
	}
	return lua.LNil
}

// LoadObject reads a YAML or JSON manifest the way the controller holds a live object:
// integers as int64, other numbers as float64 (like an unstructured.Unstructured).
func LoadObject(path string) (map[string]any, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseObject(raw)
}

// ParseObject is LoadObject for bytes already read.
func ParseObject(raw []byte) (map[string]any, error) {
	data, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, err
	}
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.UseNumber()
	var obj map[string]any
	if err := decoder.Decode(&obj); err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, fmt.Errorf("empty manifest")
	}
	converted, _ := numbers(obj).(map[string]any)
	return converted, nil
}

func numbers(value any) any {
	switch v := value.(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		f, err := v.Float64()
		if err != nil {
			return v.String()
		}
		return f
	case []any:
		for i := range v {
			v[i] = numbers(v[i])
		}
		return v
	case map[string]any:
		for k := range v {
			v[k] = numbers(v[k])
		}
		return v
	}
	return value
}
