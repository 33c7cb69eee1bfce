import { describe, expect, it } from 'vitest'
import { mount } from '@vue/test-utils'
import type { Schemas } from '../../api/client'
import { Fleet } from './fleet'
import { linkTone, nvlinkSummary } from './topology'
import TopologyMatrix from './TopologyMatrix.vue'

describe('topology', () => {
  it('tones each kind of link', () => {
    expect(linkTone('NV12')).toBe('nvlink')
    expect(linkTone('PIX')).toBe('switch')
    expect(linkTone('SYS')).toBe('sys')
    expect(linkTone('X')).toBe('')
    expect(linkTone('NVx')).toBe('')
  })

  it('sums up the NVLink of a matrix', () => {
    expect(nvlinkSummary([])).toBe('no GPUs')
    expect(nvlinkSummary([{ links: ['X', 'PIX'] }, { links: ['PIX', 'X'] }])).toBe('PCIe only')
    expect(nvlinkSummary([{ links: ['X', 'NV4'] }, { links: ['NV4', 'X'] }])).toBe('NVLink between GPUs')
    expect(nvlinkSummary([{ links: ['X', 'NV2', 'SYS'] }, { links: ['NV2', 'X', 'SYS'] }, { links: ['SYS', 'SYS', 'X'] }])).toBe(
      'NVLink on 2 of 3 GPUs',
    )
  })
})

describe('the fleet keeps each host topology', () => {
  const matrix = {
    gpus: [
      { index: 0, links: ['X', 'NV4'], cpu_affinity: '0-31', numa_node: 0 },
      { index: 1, links: ['NV4', 'X'], cpu_affinity: '0-31', numa_node: 0 },
    ],
  }
  const host = (topology: unknown) =>
    ({
      name: 'h1', labels: [], reachable: true, down_since: null, down_reason: null, last_seen: null, sampled_at: null,
      cpu_percent: null, load_1m: null, load_5m: null, load_15m: null, memory_used_mib: null, memory_total_mib: null,
      gpu_status: 'ok', gpu_error: null, gpus: [], topology,
    }) as Schemas['HostState']

  it('from the hosts answer, then from host.topology_read', () => {
    const fleet = new Fleet()
    fleet.load([host(null)])
    expect(fleet.hosts.get('h1')!.topology).toBeNull()
    fleet.applyTopology({ host: 'h1', topology: matrix })
    expect(fleet.hosts.get('h1')!.topology).toEqual(matrix)
    fleet.load([host(matrix)])
    expect(fleet.hosts.get('h1')!.topology).toEqual(matrix)
    fleet.applyTopology({ host: 'nope', topology: matrix }) // not a host here: nothing
    expect(fleet.hosts.has('nope')).toBe(false)
  })
})

describe('TopologyMatrix', () => {
  it('shows each pair with its tone, the affinities and a legend', () => {
    const topology = {
      gpus: [
        { index: 0, links: ['X', 'NV4', 'SYS'], cpu_affinity: '0-31', numa_node: 0 },
        { index: 1, links: ['NV4', 'X', 'SYS'], cpu_affinity: '0-31', numa_node: 0 },
        { index: 2, links: ['SYS', 'SYS', 'X'], cpu_affinity: null, numa_node: null },
      ],
    }
    const wrapper = mount(TopologyMatrix, { props: { host: 'gpu-01', topology } })
    expect(wrapper.find('summary').text()).toBe('GPU interconnect · NVLink on 2 of 3 GPUs')
    expect(wrapper.find('table').attributes('aria-label')).toBe('GPU interconnect of gpu-01')
    const rows = wrapper.findAll('tbody tr').map((tr) => tr.findAll('th, td').map((c) => c.text()))
    expect(rows[0]).toEqual(['GPU0', '·', 'NV4', 'SYS', '0-31', '0'])
    expect(rows[2]).toEqual(['GPU2', 'SYS', 'SYS', '·', '—', '—'])
    expect(wrapper.find('tbody tr td.nvlink').text()).toBe('NV4')
    expect(wrapper.findAll('.legend li').map((li) => li.text())[0]).toBe('NV# NVLink (# bonded links)')
  })
})
