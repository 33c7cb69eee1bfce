import { describe, expect, it, vi } from 'vitest'
import { fetchAllPages, usePager, type PageQuery } from './paging'

/** A list endpoint over `count` numbers, recording the pages asked for. */
function endpoint(count: number) {
  const asked: PageQuery[] = []
  const all = Array.from({ length: count }, (_, i) => i)
  const fetchPage = vi.fn(async (query: PageQuery) => {
    asked.push(query)
    return { items: all.slice(query.offset, query.offset + query.limit), total: count }
  })
  return { asked, fetchPage }
}

describe('fetchAllPages', () => {
  it('reads page after page until the total is reached', async () => {
    const { asked, fetchPage } = endpoint(1000)
    const items = await fetchAllPages(fetchPage)
    expect(items).toHaveLength(1000)
    expect(items[999]).toBe(999)
    expect(asked).toEqual([
      { limit: 500, offset: 0 },
      { limit: 500, offset: 500 },
    ])
  })

  it('stops at a short or empty page', async () => {
    const short = endpoint(7)
    expect(await fetchAllPages(short.fetchPage, { pageSize: 5 })).toHaveLength(7)
    expect(short.asked).toHaveLength(2)
    const empty = endpoint(0)
    expect(await fetchAllPages(empty.fetchPage)).toEqual([])
    expect(empty.asked).toHaveLength(1)
  })

  it('stops at max items', async () => {
    const { asked, fetchPage } = endpoint(100)
    expect(await fetchAllPages(fetchPage, { pageSize: 10, max: 30 })).toHaveLength(30)
    expect(asked.map((q) => q.offset)).toEqual([0, 10, 20])
  })

  it('lets a failure through', async () => {
    await expect(fetchAllPages(() => Promise.reject(new Error('down')))).rejects.toThrow('down')
  })
})

describe('usePager', () => {
  it('reads the page at its offset and says where it is', async () => {
    const { asked, fetchPage } = endpoint(60)
    const pager = usePager(25, fetchPage)
    expect(pager.rangeText.value).toBe('')
    await pager.load()
    expect(asked).toEqual([{ limit: 25, offset: 0 }])
    expect(pager.items.value).toHaveLength(25)
    expect(pager.total.value).toBe(60)
    expect(pager.rangeText.value).toBe('1–25 of 60')
    expect(pager.isFirst.value).toBe(true)
    expect(pager.isLast.value).toBe(false)
  })

  it('goes on and back a page at a time, not before the first', async () => {
    const { fetchPage } = endpoint(60)
    const pager = usePager(25, fetchPage, 25)
    await pager.load()
    pager.go(1)
    expect(pager.offset.value).toBe(50)
    await pager.load()
    expect(pager.items.value).toEqual([50, 51, 52, 53, 54, 55, 56, 57, 58, 59])
    expect(pager.rangeText.value).toBe('51–60 of 60')
    expect(pager.isLast.value).toBe(true)
    pager.go(-1)
    pager.go(-1)
    pager.go(-1)
    expect(pager.offset.value).toBe(0)
    expect(pager.isFirst.value).toBe(true)
  })

  it('keeps the page shown when a read fails', async () => {
    const { fetchPage } = endpoint(60)
    const pager = usePager(25, fetchPage)
    await pager.load()
    fetchPage.mockRejectedValueOnce(new Error('down'))
    pager.go(1)
    await expect(pager.load()).rejects.toThrow('down')
    expect(pager.items.value[0]).toBe(0)
    expect(pager.total.value).toBe(60)
  })
})
