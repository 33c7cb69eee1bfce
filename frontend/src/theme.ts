// Light or dark: the person's choice, kept; until they choose, the system's.
import { ref, watchEffect } from 'vue'

type Theme = 'light' | 'dark'
const KEY = 'warden.theme'
const system = window.matchMedia?.('(prefers-color-scheme: dark)').matches ? 'dark' : 'light'

export const theme = ref<Theme>((localStorage.getItem(KEY) as Theme | null) ?? system)

watchEffect(() => {
  document.documentElement.dataset.theme = theme.value
})

export function toggleTheme(): void {
  theme.value = theme.value === 'dark' ? 'light' : 'dark'
  localStorage.setItem(KEY, theme.value)
}
