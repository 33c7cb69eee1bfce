// The gateway's paged lists (`?limit=&offset=`, answered with `{items, total}`): read whole, or
// shown a page at a time.
import { computed, ref, type Ref } from 'vue'

export interface PageQuery {
  limit: number
  offset: number
}

export interface Page<T> {
  items: T[]
  total: number
}

export type FetchPage<T> = (query: PageQuery) => Promise<Page<T>>

/** Every item, page after page, until `total` is reached or a short page ends the list; at most
 *  `max` items. 500 is the largest page the gateway gives. */
export async function fetchAllPages<T>(fetchPage: FetchPage<T>, { pageSize = 500, max = Infinity } = {}): Promise<T[]> {
  const items: T[] = []
  for (let offset = 0; offset < max; offset += pageSize) {
    const page = await fetchPage({ limit: pageSize, offset })
    items.push(...page.items)
    if (page.items.length < pageSize || items.length >= page.total) break
  }
  return items
}

export interface Pager<T> {
  /** Where the page shown starts. */
  offset: Ref<number>
  /** The page shown and the size of the whole list, as last read. */
  items: Ref<T[]>
  total: Ref<number>
  /** Reads the page at `offset`; what it throws is the caller's (see useAction). */
  load: () => Promise<void>
  /** Moves `pages` pages on (1: the next, -1: the previous), not before the first. */
  go: (pages: number) => void
  isFirst: Ref<boolean>
  isLast: Ref<boolean>
  /** "26–50 of 120", or '' for an empty list. */
  rangeText: Ref<string>
}

/** A list shown `pageSize` items at a time, from `initialOffset` (e.g. from the URL). */
export function usePager<T>(pageSize: number, fetchPage: FetchPage<T>, initialOffset = 0): Pager<T> {
  const offset = ref(initialOffset)
  const items = ref([]) as Ref<T[]> // deep: a page may update its rows in place (live events)
  const total = ref(0)

  async function load(): Promise<void> {
    const page = await fetchPage({ limit: pageSize, offset: offset.value })
    items.value = page.items
    total.value = page.total
  }

  return {
    offset,
    items,
    total,
    load,
    go: (pages) => {
      offset.value = Math.max(0, offset.value + pages * pageSize)
    },
    isFirst: computed(() => offset.value === 0),
    isLast: computed(() => offset.value + pageSize >= total.value),
    rangeText: computed(() =>
      total.value ? `${offset.value + 1}–${Math.min(offset.value + pageSize, total.value)} of ${total.value}` : '',
    ),
  }
}
