// Command managed-runner-validate checks ManagedRunner manifests against the CRD offline with the
// API server's own code: pruning of unknown fields (refused, as fieldValidation=Strict does), the
// structural defaults, then the schema (types, patterns, enums, bounds), object metadata, list
// invariants and the CEL rules, answering with the API server's own messages. `runner-operator plan`
// runs it when it has no cluster to dry-run the apply on.
//
// Usage: managed-runner-validate --crd CRD.yaml < requests.json
// stdin: a JSON array of {"object": {...}, "old": {...} | null}; with "old" the object is checked as
// an update of it (transition rules such as immutable fields, ratcheting), else as a create.
// stdout: a JSON array with one {"error": "..." | null} per request.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured/unstructuredscheme"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/endpoints/request"
	"sigs.k8s.io/yaml"
)

// version is one served version of the CRD, ready to validate objects of it.
type version struct {
	kind       schema.GroupVersionKind
	structural *structuralschema.Structural
	strategy   interface {
		Validate(context.Context, runtime.Object) field.ErrorList
		ValidateUpdate(context.Context, runtime.Object, runtime.Object) field.ErrorList
	}
}

// request is one manifest to check, and the stored version it would replace, if any.
type checkRequest struct {
	Object map[string]any `json:"object"`
	Old    map[string]any `json:"old"`
}

func main() {
	crdPath := flag.String("crd", "", "the CustomResourceDefinition (YAML or JSON)")
	flag.Parse()
	if *crdPath == "" {
		fail("usage: managed-runner-validate --crd CRD.yaml < objects.json")
	}
	versions, err := load(*crdPath)
	if err != nil {
		fail(err.Error())
	}
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("reading stdin: " + err.Error())
	}
	var requests []checkRequest
	// The API server's JSON reading: whole numbers become int64, as the schema's integer checks expect.
	if err := utiljson.Unmarshal(input, &requests); err != nil {
		fail("stdin is not a JSON array of {object, old} requests: " + err.Error())
	}
	results := make([]map[string]any, 0, len(requests))
	for _, req := range requests {
		var refusal any
		if message := check(versions, req.Object, req.Old); message != "" {
			refusal = message
		}
		results = append(results, map[string]any{"error": refusal})
	}
	if err := json.NewEncoder(os.Stdout).Encode(results); err != nil {
		fail(err.Error())
	}
}

func fail(message string) {
	fmt.Fprintln(os.Stderr, "managed-runner-validate: "+message)
	os.Exit(1)
}

// load reads the CRD and prepares every served version the way the API server does.
func load(file string) (map[string]version, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var external apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &external); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var crd apiextensions.CustomResourceDefinition
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&external, &crd, nil); err != nil {
		return nil, err
	}
	out := map[string]version{}
	for _, v := range crd.Spec.Versions {
		// The internal form keeps a schema (and subresources) shared by every version at the top.
		validationSchema, subresources := v.Schema, v.Subresources
		if validationSchema == nil {
			validationSchema = crd.Spec.Validation
		}
		if subresources == nil {
			subresources = crd.Spec.Subresources
		}
		if !v.Served || validationSchema == nil || validationSchema.OpenAPIV3Schema == nil {
			continue
		}
		props := validationSchema.OpenAPIV3Schema
		structural, err := structuralschema.NewStructural(props)
		if err != nil {
			return nil, fmt.Errorf("%s %s: not a structural schema: %w", crd.Name, v.Name, err)
		}
		validator, _, err := validation.NewSchemaValidator(props)
		if err != nil {
			return nil, err
		}
		kind := schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}
		var status *apiextensions.CustomResourceSubresourceStatus
		if subresources != nil {
			status = subresources.Status
		}
		strategy := customresource.NewStrategy(
			unstructuredscheme.NewUnstructuredObjectTyper(),
			crd.Spec.Scope == apiextensions.NamespaceScoped,
			kind, validator, nil, structural, status, nil, nil,
		)
		out[crd.Spec.Group+"/"+v.Name] = version{kind: kind, structural: structural, strategy: strategy}
	}
	return out, nil
}

// check returns the API server's refusal of creating obj (of replacing old with it, when old is
// given), or "" when it would be accepted.
func check(versions map[string]version, obj, old map[string]any) string {
	if obj == nil {
		return "no object to check"
	}
	u := &unstructured.Unstructured{Object: obj}
	v, ok := versions[u.GetAPIVersion()]
	if !ok || u.GetKind() != v.kind.Kind {
		return fmt.Sprintf("no matches for kind %q in version %q", u.GetKind(), u.GetAPIVersion())
	}
	// fieldValidation=Strict: a field the schema does not declare is refused, not silently pruned.
	unknown := structuralpruning.PruneWithOptions(u.Object, v.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	if len(unknown) > 0 {
		fields := make([]string, 0, len(unknown))
		for _, p := range unknown {
			fields = append(fields, fmt.Sprintf("unknown field %q", p))
		}
		return fmt.Sprintf("%s in version %q cannot be handled as a %s: strict decoding error: %s",
			v.kind.Kind, v.kind.Version, v.kind.Kind, strings.Join(fields, ", "))
	}
	// As the API server's decoder does: a null where the schema allows none is dropped, so a required
	// field set to null reads "Required value".
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(u.Object, v.structural)
	structuraldefaulting.Default(u.Object, v.structural)
	ctx := request.WithNamespace(context.Background(), u.GetNamespace())
	errs := metavalidation.ValidateObjectMetaAccessor(u, true, path.ValidatePathSegmentName, field.NewPath("metadata"))
	if old == nil {
		errs = append(errs, v.strategy.Validate(ctx, u)...)
	} else {
		// The stored version went through the same decoding when it was written.
		stored := &unstructured.Unstructured{Object: old}
		// What the API server fills in for an apply: the stored version's resourceVersion.
		if stored.GetResourceVersion() == "" {
			stored.SetResourceVersion("1")
		}
		if u.GetResourceVersion() == "" {
			u.SetResourceVersion(stored.GetResourceVersion())
		}
		structuralpruning.Prune(stored.Object, v.structural, true)
		structuraldefaulting.PruneNonNullableNullsWithoutDefaults(stored.Object, v.structural)
		structuraldefaulting.Default(stored.Object, v.structural)
		errs = append(errs, v.strategy.ValidateUpdate(ctx, u, stored)...)
	}
	if len(errs) == 0 {
		return ""
	}
	return apierrors.NewInvalid(v.kind.GroupKind(), u.GetName(), errs).Error()
}
