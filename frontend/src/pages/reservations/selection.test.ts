import { describe, expect, it } from 'vitest'
import { bookableIds, chooseSelection, loadSelection, saveSelection, selectionKey } from './selection'

const gpus = ['a0', 'a1', 'b0', 'b1'].map((uuid) => ({ uuid }))

function memory(): Storage & { data: Map<string, string> } {
  const data = new Map<string, string>()
  return {
    data,
    get length() {
      return data.size
    },
    clear: () => data.clear(),
    getItem: (k: string) => data.get(k) ?? null,
    key: (i: number) => [...data.keys()][i] ?? null,
    removeItem: (k: string) => void data.delete(k),
    setItem: (k: string, v: string) => void data.set(k, v),
  }
}

describe('bookableIds', () => {
  it('keeps the GPUs with a slot free for the person or booked by them, in the GPU list order', () => {
    const overview = [
      { uuid: 'b1', runs: [{ state: 'not_allowed' }, { state: 'free' }] },
      { uuid: 'a1', runs: [{ state: 'not_allowed' }] },
      { uuid: 'a0', runs: [{ state: 'free' }] },
      { uuid: 'b0', runs: [{ state: 'not_allowed' }, { state: 'mine' }] },
    ]
    expect(bookableIds(gpus, overview)).toEqual(['a0', 'b0', 'b1'])
  })

  it('someone else\'s booking says nothing of whether the person may book the GPU', () => {
    expect(bookableIds(gpus, [{ uuid: 'a0', runs: [{ state: 'not_allowed' }, { state: 'taken' }] }])).toEqual([])
  })

  it('a GPU the overview does not list is not bookable', () => {
    expect(bookableIds(gpus, [{ uuid: 'a1', runs: [{ state: 'free' }] }])).toEqual(['a1'])
    expect(bookableIds(gpus, [{ uuid: 'a1', runs: [] }])).toEqual([])
  })
})

describe('chooseSelection', () => {
  const base = { asked: null, remembered: null, known: gpus, bookable: ['a1', 'b0'] }

  it('shows every GPU the person may book by default', () => {
    expect(chooseSelection(base)).toEqual(['a1', 'b0'])
  })

  it('waits (null) while the bookable GPUs are not known', () => {
    expect(chooseSelection({ ...base, bookable: null })).toBeNull()
  })

  it('the link wins, then the remembered choice', () => {
    expect(chooseSelection({ ...base, asked: ['b1'], remembered: ['a0'] })).toEqual(['b1'])
    expect(chooseSelection({ ...base, remembered: ['b1', 'a0'], bookable: null })).toEqual(['a0', 'b1'])
  })

  it('forgets remembered GPUs that are gone, and falls back when none is left', () => {
    expect(chooseSelection({ ...base, remembered: ['gone', 'b1'] })).toEqual(['b1'])
    expect(chooseSelection({ ...base, remembered: ['gone'] })).toEqual(['a1', 'b0'])
  })

  it('an emptied choice stays empty, in the link or remembered (the page asks to choose)', () => {
    expect(chooseSelection({ ...base, asked: [] })).toEqual([])
    expect(chooseSelection({ ...base, remembered: [] })).toEqual([])
    expect(chooseSelection({ ...base, remembered: [], bookable: null })).toEqual([])
  })

  it('shows every GPU to someone who may book none', () => {
    expect(chooseSelection({ ...base, bookable: [] })).toEqual(['a0', 'a1', 'b0', 'b1'])
  })
})

describe('the remembered choice', () => {
  it('is kept per user', () => {
    const storage = memory()
    saveSelection(storage, 'alice', ['a0', 'b1'])
    saveSelection(storage, 'bob', ['b0'])
    expect(loadSelection(storage, 'alice')).toEqual(['a0', 'b1'])
    expect(loadSelection(storage, 'bob')).toEqual(['b0'])
    expect(loadSelection(storage, 'carol')).toBeNull()
    expect(storage.data.get(selectionKey('alice'))).toBe('["a0","b1"]')
  })

  it('reads anything broken as no choice, and drops entries that are not uuids', () => {
    const storage = memory()
    storage.setItem(selectionKey('alice'), '{not json')
    expect(loadSelection(storage, 'alice')).toBeNull()
    storage.setItem(selectionKey('alice'), '{"a": 1}')
    expect(loadSelection(storage, 'alice')).toBeNull()
    storage.setItem(selectionKey('alice'), '["a0", 3, "", "a0", null]')
    expect(loadSelection(storage, 'alice')).toEqual(['a0'])
  })

  it('a storage that refuses to write loses nothing but the choice', () => {
    const refusing = { setItem: () => { throw new Error('QuotaExceededError') } }
    expect(() => saveSelection(refusing, 'alice', ['a0'])).not.toThrow()
  })
})
