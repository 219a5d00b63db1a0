// Package refusers names the policies that refused a request, as a
// ratelimit.Result tells them, for the tests of every package.
package refusers

import "github.com/tokenfair/ratelimit"

// Names returns the names of the policies that refused res: the enforcing
// ones, or with dryRun the dry-run ones that would have; nil for none.
func Names(res ratelimit.Result, dryRun bool) []string {
	if res.Results == nil {
		if res.Allowed || dryRun || res.Policy == nil {
			return nil
		}
		return []string{res.Policy.Name}
	}
	var names []string
	for _, r := range res.Results {
		if !r.Allowed && r.Policy != nil && r.Policy.DryRun == dryRun {
			names = append(names, r.Policy.Name)
		}
	}
	return names
}
