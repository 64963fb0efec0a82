package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// regenerate is what the user runs to bring docs/API.md up to date.
const regenerate = "go run ./internal/tools/apidoc"

func main() {
	root := flag.String("root", ".", "module root")
	out := flag.String("o", "docs/API.md", "output file, relative to -root unless absolute; - for stdout")
	check := flag.Bool("check", false, "do not write: exit 1 if the output file is out of date")
	count := flag.Bool("count", false, "do not write: print \"package<TAB>count\" lines and a total")
	flag.Parse()
	if err := run(*root, *out, *check, *count); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(root, out string, check, count bool) error {
	modPath, pkgs, err := Generate(root)
	if err != nil {
		return err
	}
	if count {
		fmt.Print(CountTable(pkgs))
		return nil
	}
	md := Markdown(modPath, pkgs)
	if out == "-" {
		_, err := os.Stdout.Write(md)
		return err
	}
	file := out
	if !filepath.IsAbs(file) {
		file = filepath.Join(root, file)
	}
	if check {
		return Check(file, out, md)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return fmt.Errorf("apidoc: %w", err)
	}
	if err := os.WriteFile(file, md, 0o644); err != nil {
		return fmt.Errorf("apidoc: %w", err)
	}
	return nil
}

// Check compares the file with the generated markdown; name is how the
// error refers to the file. The error says how to regenerate it and shows
// the differing lines.
func Check(file, name string, md []byte) error {
	onDisk, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s does not exist: run `%s`", name, regenerate)
	}
	if err != nil {
		return fmt.Errorf("apidoc: %w", err)
	}
	if bytes.Equal(onDisk, md) {
		return nil
	}
	return fmt.Errorf("%s is out of date: run `%s`\n%s", name, regenerate,
		lineDiff(name+" (on disk)", name+" (generated)", string(onDisk), string(md)))
}
