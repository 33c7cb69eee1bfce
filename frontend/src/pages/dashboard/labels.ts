// Host labels on the dashboard: GET /api/v1/hosts carries each host's `labels` (a gateway
// without them counts as none), and the label filter keeps the hosts that have the one chosen.

/** A host's labels from the REST answer; anything else than a list of strings counts as none. */
export function labelsOf(host: { labels?: unknown }): string[] {
  return Array.isArray(host.labels) ? host.labels.filter((l): l is string => typeof l === 'string') : []
}

/** Host name → its labels. */
export function labelIndex(hosts: readonly { name: string; labels?: unknown }[]): Map<string, string[]> {
  return new Map(hosts.map((h) => [h.name, labelsOf(h)]))
}

/** Every label in use, sorted, with how many hosts carry it. */
export function allLabels(index: ReadonlyMap<string, readonly string[]>): { label: string; hosts: number }[] {
  const counts = new Map<string, number>()
  for (const labels of index.values()) for (const l of new Set(labels)) counts.set(l, (counts.get(l) ?? 0) + 1)
  return [...counts].map(([label, hosts]) => ({ label, hosts })).sort((a, b) => a.label.localeCompare(b.label))
}

/** The names to show: those of `names` that carry `label`; all of them when no label is chosen.
 *  A host the index does not know yet (just added, labels not loaded) has none. */
export function withLabel(names: readonly string[], index: ReadonlyMap<string, readonly string[]>, label: string): string[] {
  if (!label) return [...names]
  return names.filter((n) => index.get(n)?.includes(label))
}
