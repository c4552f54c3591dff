package stack

import (
	"debug/elf"
	"debug/gosym"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildTimeout bounds one make run: a cold cache compiles the AWS SDK for arm64.
const buildTimeout = 8 * time.Minute

// checkLambdaBinary fails unless path is a static linux/arm64 executable, what
// provided.al2023 on arm64 runs as bootstrap.
func checkLambdaBinary(t *testing.T, path string, machine elf.Machine) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	defer f.Close()
	if f.Machine != machine || f.Type != elf.ET_EXEC {
		t.Errorf("%s: %v %v, want an %v executable", path, f.Machine, f.Type, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s is dynamically linked (CGO_ENABLED must be 0)", path)
		}
	}
	if f.Section(".go.buildinfo") == nil {
		t.Errorf("%s: not a Go binary", path)
	}
}

// uncalledMethod is an exported method of a type every function links (the DynamoDB
// client) that no function calls. The linker drops such methods unless the program
// can call methods by reflection (reflect.Value.Method or MethodByName with a name
// that is not a constant); then it keeps every exported method of every type held in
// an interface, and a bootstrap grows by half (runner: 20 MB to 30 MB, when
// google.golang.org/protobuf before v1.36.12 called MethodByName("Methods"), which Go
// 1.26's reflect.Value.Methods answers).
const uncalledMethod = "github.com/aws/aws-sdk-go-v2/service/dynamodb.(*Client).DeleteBackup"

// checkMethodsEliminated fails if the bootstrap at path kept uncalledMethod: its
// function table (.gopclntab, kept by -s -w) names every function linked in.
func checkMethodsEliminated(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	defer f.Close()
	pcln, text := f.Section(".gopclntab"), f.Section(".text")
	if pcln == nil || text == nil {
		t.Errorf("%s: no .gopclntab or .text section", path)
		return
	}
	data, err := pcln.Data()
	if err != nil {
		t.Errorf("%s: .gopclntab: %v", path, err)
		return
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		t.Errorf("%s: function table: %v", path, err)
		return
	}
	if tab.LookupFunc(uncalledMethod) != nil {
		t.Errorf("%s links %s, which nothing calls: something in it calls methods by reflection, so the linker kept every exported method (go build -ldflags=-dumpdep, look for <ReflectMethod>)", path, uncalledMethod)
	}
	if len(tab.Funcs) == 0 {
		t.Errorf("%s: the function table is empty", path)
	}
}

// TestSamBuildTargets runs, for every function of the template, what `sam build` runs
// for BuildMethod makefile: `make build-<LogicalId>` with ARTIFACTS_DIR, in the
// directory of CodeUri. Each must leave a static linux/arm64 bootstrap built from
// functions/<name> with -tags lambda.norpc.
func TestSamBuildTargets(t *testing.T) {
	t.Parallel()
	makeBin := tool(t, "make", "sam build runs the Makefile")
	s := loadStack(t)
	root := repoRoot(t)
	for _, f := range functions(t, s) {
		dir := filepath.Join(root, f.Props.CodeUri)
		art := filepath.Join(t.TempDir(), f.LogicalID)
		plan := run(t, dir, nil, time.Minute, makeBin, "-n", "build-"+f.LogicalID, "ARTIFACTS_DIR="+art)
		for _, want := range []string{"GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0", "-tags lambda.norpc", "-o " + art + "/bootstrap", "./functions/" + f.Name} {
			if !strings.Contains(plan, want) {
				t.Errorf("make build-%s would run:\n%s\nwant %q in it", f.LogicalID, plan, want)
			}
		}
		run(t, dir, nil, buildTimeout, makeBin, "build-"+f.LogicalID, "ARTIFACTS_DIR="+art)
		checkLambdaBinary(t, filepath.Join(art, "bootstrap"), elf.EM_AARCH64)
	}
	// Without ARTIFACTS_DIR the target refuses instead of writing /bootstrap, and a
	// logical id that names no function fails.
	for _, args := range [][]string{{"build-ConnectFunction", "ARTIFACTS_DIR="}, {"build-NoSuchFunction", "ARTIFACTS_DIR=" + t.TempDir()}} {
		if out, err := runErr(root, nil, time.Minute, makeBin, args...); err == nil {
			t.Errorf("make %s succeeded:\n%s", strings.Join(args, " "), out)
		}
	}
}

// TestMakeBuild: `make build` leaves build/<function>/bootstrap (here under BUILD_DIR)
// for every directory under functions/, a static linux/arm64 executable, in which the
// linker dropped the methods nothing calls.
func TestMakeBuild(t *testing.T) {
	t.Parallel()
	makeBin := tool(t, "make", "runs the Makefile")
	out := t.TempDir()
	log := run(t, repoRoot(t), nil, buildTimeout, makeBin, "build", "BUILD_DIR="+out)
	for _, dir := range functionDirs(t) {
		if !strings.Contains(log, fmt.Sprintf("build %s\n", dir)) {
			t.Errorf("make build did not build %s:\n%s", dir, log)
		}
		checkLambdaBinary(t, filepath.Join(out, dir, "bootstrap"), elf.EM_AARCH64)
		checkMethodsEliminated(t, filepath.Join(out, dir, "bootstrap"))
	}
}
