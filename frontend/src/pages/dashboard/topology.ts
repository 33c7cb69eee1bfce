// A host's GPU interconnect as `nvidia-smi topo -m` gives it: the kind of each link, best first.

export interface LinkKind {
  key: string
  text: string
  /** a CSS class: nvlink, switch, bridge, node, sys */
  tone: string
}

export const LEGEND: readonly LinkKind[] = [
  { key: 'NV#', text: 'NVLink (# bonded links)', tone: 'nvlink' },
  { key: 'PIX', text: 'one PCIe switch', tone: 'switch' },
  { key: 'PXB', text: 'several PCIe switches', tone: 'switch' },
  { key: 'PHB', text: 'a PCIe host bridge (the CPU)', tone: 'bridge' },
  { key: 'NODE', text: 'host bridges of one NUMA node', tone: 'node' },
  { key: 'SYS', text: 'across NUMA nodes (QPI/UPI)', tone: 'sys' },
]

/** The CSS tone of a link ("" for the GPU itself and unknown links). */
export function linkTone(link: string): string {
  if (/^NV\d+$/.test(link)) return 'nvlink'
  return LEGEND.find((kind) => kind.key === link)?.tone ?? ''
}

/** How many GPUs are joined by NVLink to at least one other: the matrix's headline. */
export function nvlinkSummary(rows: readonly { links: readonly string[] }[]): string {
  const joined = rows.filter((row) => row.links.some((link) => /^NV\d+$/.test(link))).length
  if (!rows.length) return 'no GPUs'
  if (!joined) return 'PCIe only'
  return joined === rows.length ? 'NVLink between GPUs' : `NVLink on ${joined} of ${rows.length} GPUs`
}
