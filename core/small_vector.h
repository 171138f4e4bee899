// `SmallVector`: a vector of trivially copyable values that keeps up to N of them inline, so the
// shapes and strides of arrays of up to N dimensions cost no heap allocation. It reads like
// std::vector (the subset Loom uses) and converts to and from it implicitly.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace loom {

template <typename T, size_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable_v<T>, "SmallVector holds trivially copyable values");

 public:
  using value_type = T;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  SmallVector() = default;
  explicit SmallVector(size_t n) { resize(n); }
  SmallVector(size_t n, const T& v) { assign(n, v); }
  SmallVector(std::initializer_list<T> il) { assign(il.begin(), il.end()); }
  template <typename It, typename = typename std::iterator_traits<It>::iterator_category>
  SmallVector(It first, It last) {
    assign(first, last);
  }
  SmallVector(const std::vector<T>& v) { assign(v.begin(), v.end()); }  // NOLINT: implicit on purpose
  SmallVector(const SmallVector& o) { assign(o.begin(), o.end()); }
  SmallVector(SmallVector&& o) noexcept { take(o); }
  ~SmallVector() {
    if (!is_inline()) std::free(data_);
  }
  SmallVector& operator=(const SmallVector& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  SmallVector& operator=(SmallVector&& o) noexcept {
    if (this != &o) {
      if (!is_inline()) std::free(data_);
      data_ = inline_;
      size_ = 0;
      cap_ = N;
      take(o);
    }
    return *this;
  }
  SmallVector& operator=(std::initializer_list<T> il) {
    assign(il.begin(), il.end());
    return *this;
  }
  // Implicit both ways, so that code written for std::vector shapes (`std::vector<int> s = x.shape();`)
  // keeps compiling; Loom itself never converts (a conversion allocates).
  operator std::vector<T>() const { return std::vector<T>(begin(), end()); }  // NOLINT: implicit on purpose

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return cap_; }
  T* data() { return data_; }
  const T* data() const { return data_; }

  iterator begin() { return data_; }
  iterator end() { return data_ + size_; }
  const_iterator begin() const { return data_; }
  const_iterator end() const { return data_ + size_; }
  const_iterator cbegin() const { return data_; }
  const_iterator cend() const { return data_ + size_; }
  reverse_iterator rbegin() { return reverse_iterator(end()); }
  reverse_iterator rend() { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }

  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& at(size_t i) {
    if (i >= size_) throw std::out_of_range("[SmallVector::at] index out of range");
    return data_[i];
  }
  const T& at(size_t i) const { return const_cast<SmallVector*>(this)->at(i); }
  T& front() { return data_[0]; }
  const T& front() const { return data_[0]; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }

  void reserve(size_t n) {
    if (n <= cap_) return;
    if (n > UINT32_MAX) throw std::length_error("[SmallVector] more than 2^32 - 1 elements");
    T* p = static_cast<T*>(std::malloc(n * sizeof(T)));
    if (!p) throw std::bad_alloc();
    if (size_) std::memcpy(p, data_, size_ * sizeof(T));
    if (!is_inline()) std::free(data_);
    data_ = p;
    cap_ = n;
  }
  void resize(size_t n) { resize(n, T()); }
  void resize(size_t n, const T& v) {
    reserve(n);  // throws before size_ could wrap
    for (size_t i = size_; i < n; ++i) data_[i] = v;
    size_ = n;
  }
  void clear() { size_ = 0; }
  void push_back(const T& v) {
    if (size_ == cap_) {
      T copy = v;  // v may live in this vector
      reserve(grown(size_ + 1));
      data_[size_++] = copy;
    } else {
      data_[size_++] = v;
    }
  }
  template <typename... Args>
  T& emplace_back(Args&&... args) {
    push_back(T(std::forward<Args>(args)...));
    return back();
  }
  void pop_back() { --size_; }

  void assign(size_t n, const T& v) {
    T copy = v;
    clear();
    resize(n, copy);
  }
  template <typename It, typename = typename std::iterator_traits<It>::iterator_category>
  void assign(It first, It last) {
    SmallVector tmp;  // the range may alias this vector
    const T* src = nullptr;
    size_t n = 0;
    if constexpr (std::is_pointer_v<It> && std::is_same_v<std::remove_cv_t<std::remove_pointer_t<It>>, T>) {
      src = first;
      n = static_cast<size_t>(last - first);
      if (src >= data_ && src < data_ + cap_) {
        tmp.append(first, last);
        src = tmp.data_;
      }
    } else {
      for (; first != last; ++first) tmp.push_back(static_cast<T>(*first));
      src = tmp.data_;
      n = tmp.size_;
    }
    clear();
    reserve(n);
    if (n) std::memcpy(data_, src, n * sizeof(T));
    size_ = n;
  }

  iterator insert(const_iterator pos, const T& v) { return insert(pos, size_t(1), v); }
  iterator insert(const_iterator pos, size_t n, const T& v) {
    const size_t at = static_cast<size_t>(pos - data_);
    T copy = v;
    make_gap(at, n);
    for (size_t i = 0; i < n; ++i) data_[at + i] = copy;
    return data_ + at;
  }
  template <typename It, typename = typename std::iterator_traits<It>::iterator_category>
  iterator insert(const_iterator pos, It first, It last) {
    const size_t at = static_cast<size_t>(pos - data_);
    SmallVector tmp(first, last);  // the range may alias this vector
    make_gap(at, tmp.size_);
    if (tmp.size_) std::memcpy(data_ + at, tmp.data_, tmp.size_ * sizeof(T));
    return data_ + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<T> il) { return insert(pos, il.begin(), il.end()); }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const size_t at = static_cast<size_t>(first - data_), n = static_cast<size_t>(last - first);
    if (n) std::memmove(data_ + at, data_ + at + n, (size_ - at - n) * sizeof(T));
    size_ -= n;
    return data_ + at;
  }
  void swap(SmallVector& o) noexcept {
    SmallVector t(std::move(o));
    o = std::move(*this);
    *this = std::move(t);
  }

  friend bool operator==(const SmallVector& a, const SmallVector& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const SmallVector& a, const SmallVector& b) { return !(a == b); }
  friend bool operator<(const SmallVector& a, const SmallVector& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const SmallVector& a, const std::vector<T>& b) {
    return a.size_ == b.size() && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator==(const std::vector<T>& a, const SmallVector& b) { return b == a; }
  friend bool operator!=(const SmallVector& a, const std::vector<T>& b) { return !(a == b); }
  friend bool operator!=(const std::vector<T>& a, const SmallVector& b) { return !(b == a); }

 private:
  bool is_inline() const { return data_ == inline_; }
  static size_t grown(size_t need) { return std::max(need, 2 * N); }
  template <typename It>
  void append(It first, It last) {
    for (; first != last; ++first) push_back(*first);
  }
  // Opens n slots at `at`, moving the tail up.
  void make_gap(size_t at, size_t n) {
    if (size_ + n > cap_) reserve(std::max<size_t>(size_ + n, 2 * size_t(cap_)));
    if (n) std::memmove(data_ + at + n, data_ + at, (size_ - at) * sizeof(T));
    size_ += n;
  }
  // Takes o's contents (this is empty and inline); o is left empty.
  void take(SmallVector& o) {
    if (o.is_inline()) {
      std::memcpy(inline_, o.inline_, o.size_ * sizeof(T));
      size_ = o.size_;
    } else {
      data_ = o.data_;
      size_ = o.size_;
      cap_ = o.cap_;
      o.data_ = o.inline_;
      o.cap_ = N;
    }
    o.size_ = 0;
  }

  T* data_ = inline_;
  uint32_t size_ = 0;
  uint32_t cap_ = N;
  T inline_[N];
};

}  // namespace loom
