package generator

import (
	"errors"
	"io/fs"
	"slices"
	"strings"

	"github.com/inferplane/inferplane/generator/inputs"
)

// OnlyTenant is a tenants tree as one tenant's run reads it (Options.Tenant): the node types,
// the hand-written masters, the tiers and that tenant's folder, nothing else. One tenant's load then costs
// what that tenant holds, at 20 tenants as at 20,000: the other tenants' folders are not read.
// Nothing the loader checks spans tenants (a tenant's name is its folder's), so that tenant
// loads, plans and renders exactly as in a run over the whole tree.
func OnlyTenant(fsys fs.FS, tenant string) fs.FS { return onlyTenantFS{fsys: fsys, tenant: tenant} }

type onlyTenantFS struct {
	fsys   fs.FS // the tenants folder
	tenant string
}

func (o onlyTenantFS) allowed(name string) bool {
	if name == "." {
		return true
	}
	first, _, _ := strings.Cut(name, "/")
	return slices.Contains(o.tops(), first)
}

// tops are the root's entries the tenant's run reads.
func (o onlyTenantFS) tops() []string {
	return []string{inputs.NodeTypesDir, inputs.MastersDir, inputs.TiersDir, o.tenant}
}

func (o onlyTenantFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) || !o.allowed(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	if name == "." {
		return nil, &fs.PathError{Op: "open", Path: name, Err: errors.New("read the root with ReadDir")}
	}
	return o.fsys.Open(name)
}

func (o onlyTenantFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if !fs.ValidPath(name) || !o.allowed(name) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	if name != "." {
		return fs.ReadDir(o.fsys, name)
	}
	// The root is listed by looking its few names up, never by listing every tenant.
	var out []fs.DirEntry
	for _, n := range slices.Compact(slices.Sorted(slices.Values(o.tops()))) {
		info, err := fs.Stat(o.fsys, n)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, fs.FileInfoToDirEntry(info))
	}
	return out, nil
}

func (o onlyTenantFS) ReadFile(name string) ([]byte, error) {
	if !fs.ValidPath(name) || !o.allowed(name) || name == "." {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
	}
	return fs.ReadFile(o.fsys, name)
}

func (o onlyTenantFS) Stat(name string) (fs.FileInfo, error) {
	if !fs.ValidPath(name) || !o.allowed(name) {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	return fs.Stat(o.fsys, name)
}
