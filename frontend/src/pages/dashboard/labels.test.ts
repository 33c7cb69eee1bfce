import { describe, expect, it } from 'vitest'
import { allLabels, labelIndex, labelsOf, withLabel } from './labels'

describe('host labels', () => {
  it('reads labels, treating a missing or malformed field as none', () => {
    expect(labelsOf({ labels: ['a100', 'lab-2'] })).toEqual(['a100', 'lab-2'])
    expect(labelsOf({})).toEqual([])
    expect(labelsOf({ labels: 'a100' })).toEqual([])
    expect(labelsOf({ labels: ['a', 3, null] })).toEqual(['a'])
  })

  it('lists the labels in use with their host counts', () => {
    const index = labelIndex([
      { name: 'gpu-1', labels: ['a100', 'lab-2'] },
      { name: 'gpu-2', labels: ['a100'] },
      { name: 'gpu-3' },
    ])
    expect(allLabels(index)).toEqual([
      { label: 'a100', hosts: 2 },
      { label: 'lab-2', hosts: 1 },
    ])
  })

  it('keeps the hosts with the chosen label, in their order; all when none is chosen', () => {
    const index = labelIndex([
      { name: 'gpu-1', labels: ['a100'] },
      { name: 'gpu-2', labels: ['h100'] },
      { name: 'gpu-3', labels: ['a100'] },
    ])
    const names = ['gpu-3', 'gpu-2', 'gpu-1', 'new-host']
    expect(withLabel(names, index, 'a100')).toEqual(['gpu-3', 'gpu-1'])
    expect(withLabel(names, index, 'none-such')).toEqual([])
    expect(withLabel(names, index, '')).toEqual(names)
  })
})
