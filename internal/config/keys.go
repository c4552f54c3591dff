package config

import (
	"bufio"
	"os"
	"strings"
)

// LookupKey finds the API key an `api_key_env` names: the environment variable, else
// (with dotenv) its line in the file .env of the working directory — KEY=VALUE lines,
// "#" comments, an optional "export " and optional quotes around the value. The file
// is read at each call, so an edited .env is seen without a restart.
func LookupKey(name string, dotenv bool) (string, bool) {
	if v, ok := os.LookupEnv(name); ok {
		return v, true
	}
	if !dotenv {
		return "", false
	}
	f, err := os.Open(".env")
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		line = strings.TrimPrefix(line, "export ")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) != name {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		return v, true
	}
	return "", false
}
