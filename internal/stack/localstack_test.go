package stack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	terretws "github.com/terret/terret-ws"
	"github.com/terret/terret-ws/internal/tables"
)

// TestLocalStackHook: localstack/init/ready.d/10-tables.sh is what LocalStackHook
// renders from template.yaml's tables (regenerate with -update), is valid bash, and
// docker-compose.yml mounts it and starts the services terret-ws uses.
func TestLocalStackHook(t *testing.T) {
	t.Parallel()
	defs, err := tables.Parse(terretws.Template)
	if err != nil {
		t.Fatal(err)
	}
	want := LocalStackHook(defs)
	root := repoRoot(t)
	path := filepath.Join(root, LocalStackHookPath)
	got, err := os.ReadFile(path)
	switch {
	case *update:
		if err := os.WriteFile(path, want, 0o755); err != nil {
			t.Fatal(err)
		}
	case err != nil:
		t.Fatalf("%v (generate it: go test ./internal/stack -run TestLocalStackHook -update)", err)
	case string(got) != string(want):
		t.Errorf("%s is stale: go test ./internal/stack -run TestLocalStackHook -update\n%s", LocalStackHookPath, firstDifference(string(got), string(want)))
	}
	if st, err := os.Stat(path); err == nil && st.Mode()&0o111 == 0 {
		t.Errorf("%s is not executable: LocalStack runs it directly", LocalStackHookPath)
	}
	for _, d := range defs {
		name := LocalStackTablePrefix + strings.ToLower(strings.TrimSuffix(d.LogicalID, "Table"))
		if !strings.Contains(string(want), "create_table "+name+" ") {
			t.Errorf("the hook does not create %s (%s)", name, d.LogicalID)
		}
		if d.Input.StreamSpecification != nil && !strings.Contains(string(want), "StreamViewType="+string(d.Input.StreamSpecification.StreamViewType)) {
			t.Errorf("the hook loses %s's stream", d.LogicalID)
		}
	}
	if bash := tool(t, "bash", "checks the hook's syntax"); bash != "" {
		run(t, root, nil, time.Minute, bash, "-n", path)
	}

	var compose struct {
		Services map[string]struct {
			Image       string
			Environment map[string]string
			Volumes     []string
			Ports       []string
		}
	}
	b, err := os.ReadFile(filepath.Join(root, "localstack", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatal(err)
	}
	ls, ok := compose.Services["localstack"]
	if !ok {
		t.Fatal("docker-compose.yml has no localstack service")
	}
	if !equalSets(strings.Split(ls.Environment["SERVICES"], ","), []string{"dynamodb", "dynamodbstreams", "lambda", "sqs", "iam"}) {
		t.Errorf("SERVICES = %q", ls.Environment["SERVICES"])
	}
	if !contains(ls.Volumes, "./init:/etc/localstack/init") {
		t.Errorf("volumes %v do not mount ./init at /etc/localstack/init", ls.Volumes)
	}
	if !contains(ls.Ports, "127.0.0.1:4566:4566") {
		t.Errorf("ports %v: the edge port 4566 on loopback", ls.Ports)
	}
}
