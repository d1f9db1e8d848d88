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
//
// Usage: managed-runner-validate --crd CRD.yaml --check-crd
// Checks the CRD itself as the API server does when it is applied (ValidateCustomResourceDefinition:
// structural schema, CEL compilation and the estimated CEL cost limits) and prints one JSON object:
// the errors, the total estimated CEL cost of the rules against the per-CRD budget and the most
// expensive rule against the per-rule limit. Exit status 1 when the API server would refuse the CRD.
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
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
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
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
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
	checkCRD := flag.Bool("check-crd", false, "check the CRD itself (the API server's CRD validation and CEL cost) instead of objects")
	flag.Parse()
	if *crdPath == "" {
		fail("usage: managed-runner-validate --crd CRD.yaml [--check-crd] < requests.json")
	}
	if *checkCRD {
		os.Exit(checkDefinition(*crdPath))
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

// costReport is what --check-crd prints.
type costReport struct {
	Errors []string `json:"errors"`
	// Rules is the number of CEL expressions (rules and message expressions) costed.
	Rules int `json:"rules"`
	// TotalCost is the sum of every expression's estimated cost (rule cost times the most instances
	// the schema allows), as the API server adds it up; TotalLimit is its per-CRD limit.
	TotalCost  uint64 `json:"totalCost"`
	TotalLimit uint64 `json:"totalLimit"`
	// MaxRuleCost is the most expensive single expression (MaxRule its schema path); RuleLimit is the
	// per-expression limit.
	MaxRuleCost uint64 `json:"maxRuleCost"`
	MaxRule     string `json:"maxRule"`
	RuleLimit   uint64 `json:"ruleLimit"`
}

// checkDefinition validates the CRD file as the API server validates a CRD create, prints a
// costReport and returns the exit status.
func checkDefinition(file string) int {
	raw, err := os.ReadFile(file)
	if err != nil {
		fail(err.Error())
	}
	var external apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &external); err != nil {
		fail(fmt.Sprintf("%s: %s", file, err))
	}
	// The API server defaults the object before converting and validating it.
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(&external)
	var crd apiextensions.CustomResourceDefinition
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&external, &crd, nil); err != nil {
		fail(err.Error())
	}
	report := costReport{
		Errors:     []string{},
		TotalLimit: crdvalidation.StaticEstimatedCRDCostLimit,
		RuleLimit:  crdvalidation.StaticEstimatedCostLimit,
	}
	for _, e := range crdvalidation.ValidateCustomResourceDefinition(context.Background(), &crd) {
		report.Errors = append(report.Errors, e.Error())
	}
	if len(report.Errors) == 0 {
		// The internal form keeps a schema shared by every version at the top.
		schemas := map[string]*apiextensions.JSONSchemaProps{}
		if crd.Spec.Validation != nil && crd.Spec.Validation.OpenAPIV3Schema != nil {
			schemas["openAPIV3Schema"] = crd.Spec.Validation.OpenAPIV3Schema
		}
		for _, v := range crd.Spec.Versions {
			if v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
				schemas[v.Name+".openAPIV3Schema"] = v.Schema.OpenAPIV3Schema
			}
		}
		envSet := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
		for name, root := range schemas {
			walkCost(root, name, crdvalidation.RootCELContext(root), envSet, &report)
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(report); err != nil {
		fail(err.Error())
	}
	if len(report.Errors) > 0 {
		return 1
	}
	return 0
}

// walkCost adds up the estimated cost of every CEL expression under s the way
// ValidateCustomResourceDefinition does: each expression's cost times the largest number of times
// the schema lets it run (the product of the enclosing maxItems / maxProperties, else the estimate).
func walkCost(s *apiextensions.JSONSchemaProps, at string, ctx *crdvalidation.CELSchemaContext, envSet *environment.EnvSet, report *costReport) {
	if len(s.XValidations) > 0 {
		typeInfo, err := ctx.TypeInfo()
		if err != nil || typeInfo == nil {
			report.Errors = append(report.Errors, fmt.Sprintf("%s: no CEL type information: %v", at, err))
			return
		}
		results, err := cel.Compile(typeInfo.Schema, typeInfo.DeclType, celconfig.PerCallLimit, envSet, cel.NewExpressionsEnvLoader())
		if err != nil {
			report.Errors = append(report.Errors, fmt.Sprintf("%s: %v", at, err))
			return
		}
		for i, result := range results {
			cardinality := result.MaxCardinality
			if ctx.MaxCardinality != nil {
				cardinality = *ctx.MaxCardinality
			}
			observe(report, fmt.Sprintf("%s.x-kubernetes-validations[%d].rule", at, i), multiply(result.MaxCost, cardinality))
			if result.MessageExpression != nil {
				observe(report, fmt.Sprintf("%s.x-kubernetes-validations[%d].messageExpression", at, i), result.MessageExpressionMaxCost)
			}
		}
	}
	for name := range s.Properties {
		child := s.Properties[name]
		walkCost(&child, at+".properties["+name+"]", ctx.ChildPropertyContext(&child, name), envSet, report)
	}
	if s.Items != nil && s.Items.Schema != nil {
		walkCost(s.Items.Schema, at+".items", ctx.ChildItemsContext(s.Items.Schema), envSet, report)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		walkCost(s.AdditionalProperties.Schema, at+".additionalProperties", ctx.ChildAdditionalPropertiesContext(s.AdditionalProperties.Schema), envSet, report)
	}
}

func observe(report *costReport, at string, cost uint64) {
	report.Rules++
	report.TotalCost = add(report.TotalCost, cost)
	if cost > report.MaxRuleCost || report.MaxRule == "" {
		report.MaxRuleCost, report.MaxRule = cost, at
	}
}

// multiply and add saturate at the largest uint64, as the API server's overflow guards do.
func multiply(a, b uint64) uint64 {
	if a != 0 && b > ^uint64(0)/a {
		return ^uint64(0)
	}
	return a * b
}

func add(a, b uint64) uint64 {
	if a > ^uint64(0)-b {
		return ^uint64(0)
	}
	return a + b
}
