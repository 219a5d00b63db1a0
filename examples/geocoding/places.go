package main

import "strings"

// place is an entry of the built-in gazetteer.
type place struct {
	Name     string
	Lat, Lon float64
}

// places indexes the gazetteer by normalized name.
var places = index([]place{
	{"Amsterdam", 52.3676, 4.9041},
	{"Beijing", 39.9042, 116.4074},
	{"Berlin", 52.5200, 13.4050},
	{"Buenos Aires", -34.6037, -58.3816},
	{"Cairo", 30.0444, 31.2357},
	{"Cape Town", -33.9249, 18.4241},
	{"Istanbul", 41.0082, 28.9784},
	{"London", 51.5074, -0.1278},
	{"Madrid", 40.4168, -3.7038},
	{"Mexico City", 19.4326, -99.1332},
	{"Moscow", 55.7558, 37.6173},
	{"Mumbai", 19.0760, 72.8777},
	{"Nairobi", -1.2921, 36.8219},
	{"New York", 40.7128, -74.0060},
	{"Paris", 48.8566, 2.3522},
	{"Reykjavik", 64.1466, -21.9426},
	{"Rio de Janeiro", -22.9068, -43.1729},
	{"Rome", 41.9028, 12.4964},
	{"San Francisco", 37.7749, -122.4194},
	{"Singapore", 1.3521, 103.8198},
	{"Sydney", -33.8688, 151.2093},
	{"Tokyo", 35.6762, 139.6503},
	{"Toronto", 43.6532, -79.3832},
})

func index(ps []place) map[string]place {
	m := make(map[string]place, len(ps))
	for _, p := range ps {
		m[normalize(p.Name)] = p
	}
	return m
}

// normalize folds case and runs of white space, so that "new york",
// "New York" and " NEW  YORK " name the same place.
func normalize(name string) string {
	return strings.ToLower(strings.Join(strings.Fields(name), " "))
}

// lookup returns the place called name, ignoring case and extra white space,
// and reports whether there is one.
func lookup(name string) (place, bool) {
	p, ok := places[normalize(name)]
	return p, ok
}
