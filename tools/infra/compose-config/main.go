// compose-config: `docker compose config` without Docker. Loads, interpolates, validates (schema
// and consistency) and normalises a Compose file with compose-spec/compose-go, the library the
// Docker Compose v2 CLI itself uses, then prints the resolved model. Built and run on demand by
// tools/infra/compose.mjs when the machine has no `docker compose` plugin (no Docker engine is
// needed for `config` either way).
//
//	compose-config [-f FILE]... [--format yaml|json] [--services] [--project-directory DIR]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
)

type fileList []string

func (f *fileList) String() string     { return strings.Join(*f, ",") }
func (f *fileList) Set(v string) error { *f = append(*f, v); return nil }

func main() {
	var files fileList
	flag.Var(&files, "f", "compose file (repeatable; default: compose.yaml / docker-compose.yml in the project directory)")
	format := flag.String("format", "yaml", "output format: yaml or json")
	services := flag.Bool("services", false, "print the service names, one per line")
	projectDir := flag.String("project-directory", "", "project directory (default: the first file's directory)")
	flag.Parse()

	opts := []cli.ProjectOptionsFn{cli.WithOsEnv, cli.WithDotEnv, cli.WithConfigFileEnv, cli.WithDefaultConfigPath}
	if *projectDir != "" {
		opts = append([]cli.ProjectOptionsFn{cli.WithWorkingDirectory(*projectDir)}, opts...)
	}
	po, err := cli.NewProjectOptions(files, opts...)
	if err != nil {
		fail(err)
	}
	project, err := po.LoadProject(context.Background())
	if err != nil {
		fail(err)
	}
	if *services {
		names := project.ServiceNames()
		sort.Strings(names)
		fmt.Println(strings.Join(names, "\n"))
		return
	}
	var out []byte
	switch *format {
	case "json":
		out, err = project.MarshalJSON()
	case "yaml":
		out, err = project.MarshalYAML()
	default:
		err = fmt.Errorf("unknown --format %q", *format)
	}
	if err != nil {
		fail(err)
	}
	os.Stdout.Write(out)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		fmt.Println()
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(15)
}
