package images

import (
	"fmt"
	"strings"
)

// SPDX is the software bill of materials of a locked image as an SPDX 2.3
// document (JSON), which scanners read: the image, and each Debian,
// Python and npm package it holds with its version and package URL.
func SPDX(im Locked) map[string]any {
	const image = "SPDXRef-Image"
	pkgs := []map[string]any{{
		"name": im.Name, "SPDXID": image, "versionInfo": im.Digest,
		"downloadLocation": "NOASSERTION", "filesAnalyzed": false,
		"checksums": []map[string]string{{"algorithm": "SHA256", "checksumValue": strings.TrimPrefix(im.Digest, "sha256:")}},
		"comment":   "built by sandboxd from the recipe " + im.Recipe,
	}}
	rels := []map[string]string{{"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES", "relatedSpdxElement": image}}
	for i, p := range im.Packages {
		id := fmt.Sprintf("SPDXRef-Package-%d-%s", i, spdxID(p.Name))
		purl := fmt.Sprintf("pkg:deb/debian/%s@%s?arch=%s", purlEscape(p.Name), purlEscape(p.Version), purlEscape(p.Architecture))
		switch {
		case p.Type == TypePyPI:
			purl = fmt.Sprintf("pkg:pypi/%s@%s", purlEscape(PipName(p.Name)), purlEscape(p.Version))
		case p.Type == TypeNpm:
			// A scope is the purl's namespace: pkg:npm/%40scope/name@v.
			scope, name, scoped := strings.Cut(p.Name, "/")
			if !scoped {
				scope, name = "", p.Name
			}
			purl = "pkg:npm/" + purlEscape(scope)
			if scoped {
				purl += "/"
			}
			purl += purlEscape(name) + "@" + purlEscape(p.Version)
		case im.Suite != "":
			purl += "&distro=" + purlEscape(im.Suite)
		}
		pkgs = append(pkgs, map[string]any{
			"name": p.Name, "SPDXID": id, "versionInfo": p.Version,
			"supplier": "NOASSERTION", "downloadLocation": "NOASSERTION", "filesAnalyzed": false,
			"licenseConcluded": "NOASSERTION", "licenseDeclared": "NOASSERTION", "copyrightText": "NOASSERTION",
			"externalRefs": []map[string]string{{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl", "referenceLocator": purl}},
		})
		rels = append(rels, map[string]string{"spdxElementId": image, "relationshipType": "CONTAINS", "relatedSpdxElement": id})
	}
	return map[string]any{
		"spdxVersion": "SPDX-2.3", "dataLicense": "CC0-1.0", "SPDXID": "SPDXRef-DOCUMENT",
		"name":              im.Name,
		"documentNamespace": "urn:sandboxd:image:" + im.Digest,
		// The image's own time: the same lock gives the same document.
		"creationInfo":  map[string]any{"created": "1970-01-01T00:00:00Z", "creators": []string{"Tool: sandboxd"}},
		"packages":      pkgs,
		"relationships": rels,
	}
}

// spdxID keeps what an SPDX identifier may hold: letters, digits, . and -.
func spdxID(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, s)
}

// purlEscape percent-encodes what a package URL's component may not hold.
func purlEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(".-_~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
